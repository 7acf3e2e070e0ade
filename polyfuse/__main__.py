"""``python -m polyfuse``: the same as the ``polyfuse`` command."""

from polyfuse.cli.main import run

if __name__ == "__main__":
    run()
