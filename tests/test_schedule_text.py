"""Schedules round-trip as text (issue 13): ``sched.to_text()`` / ``pf.load_schedule`` / ``schedule=text``
and the CLI's ``polyfuse schedule > s.txt`` then ``--schedule s.txt``; illegal edits name the dependence."""

from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from examples.kernels import add_exp, gemm, jacobi_2d
from polyfuse.analysis.legality import check_schedule
from polyfuse.cli.main import main

KERNELS = Path(__file__).resolve().parent.parent / "examples" / "kernels.py"
SIZES = {"N": 16, "T": 3}


def swap_sequence_children(text: str) -> str:
    """The tree text with the two children of its (only) sequence node in the other order."""
    head, rest = text.split("    - filter", 1)
    first, second = rest.split("    - filter", 1)
    return head + "    - filter" + second.rstrip("\n") + "\n" + "    - filter" + first


def run_both(prog, sched, **sizes):
    rng = np.random.default_rng(0)
    args = {n: rng.uniform(0.5, 1.5, prog.arrays[n].concrete_shape(sizes)).astype(prog.arrays[n].dtype.numpy)
            for n in prog.arguments if n in prog.arrays}
    args.update({n: 1.5 for n in prog.scalars})
    want = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}
    pf.reference(prog)(**want, **{k: v for k, v in sizes.items() if k not in prog.arguments})
    exe = pf.compile(prog, target="c", schedule=sched, tile=None)
    exe(**args, **{k: v for k, v in sizes.items() if k == "T"})
    for n in prog.arguments:
        if n in prog.arrays and prog.arrays[n].role != "input":
            np.testing.assert_allclose(args[n], want[n], rtol=1e-5)


@pytest.mark.parametrize("prog, sizes", [(jacobi_2d, SIZES), (gemm, {"N": 12, "K": 10, "M": 8})], ids=lambda p: getattr(p, "name", ""))
def test_text_round_trips_to_an_equal_tree(prog, sizes):
    sched = pf.schedule(prog, target="c", params=sizes)
    text = sched.to_text()
    tree = pf.load_schedule(text)
    check_schedule(prog, tree)
    again = pf.schedule(prog, target="c", params=sizes, schedule=text)
    assert [k.statements for k in again.kernels] == [k.statements for k in sched.kernels]
    assert pf.load_schedule(again.to_text()).get_map().is_equal(tree.get_map())  # the same order again
    run_both(prog, text, **sizes)


def test_illegal_edit_names_the_dependence():
    text = pf.schedule(jacobi_2d, target="c", params=SIZES).to_text()
    with pytest.raises(pf.IllegalTransformError, match=r"flow dependence on array 'B' from S0 .*to S1 .*is violated.*witness"):
        pf.schedule(jacobi_2d, target="c", params=SIZES, schedule=swap_sequence_children(text))


def test_unreadable_text_is_a_polyfuse_error():
    with pytest.raises(pf.PolyfuseError, match="cannot parse the schedule as an isl schedule tree"):
        pf.load_schedule('domain: "[N] -> { S0[i] : 0 <= i < N"\n')
    with pytest.raises(pf.PolyfuseError, match="cannot parse the schedule as an isl union map"):
        pf.schedule(add_exp, schedule="{ S0[i, j] -> [i, j ")


def test_cli_schedule_then_codegen_with_the_edited_file(tmp_path, capsys):
    assert main(["schedule", f"{KERNELS}::jacobi_2d", "--size", "N=16,T=3"]) == 0
    printed = capsys.readouterr().out
    saved = tmp_path / "s.txt"
    saved.write_text(printed)
    assert main(["codegen", f"{KERNELS}::jacobi_2d", "--target", "c", "--schedule", str(saved)]) == 0
    code = capsys.readouterr().out
    assert "fusion=explicit" in code
    assert main(["run", f"{KERNELS}::jacobi_2d", "--target", "c", "--schedule", str(saved), "--size", "N=16,T=3", "--check", "--repeat", "1"]) == 0
    assert "check: PASS" in capsys.readouterr().out
    section = printed[printed.index("schedule text"):]
    edited = tmp_path / "bad.txt"
    edited.write_text(swap_sequence_children(section.split("\n", 1)[1]))
    assert main(["codegen", f"{KERNELS}::jacobi_2d", "--target", "c", "--schedule", str(edited)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("polyfuse: error: illegal schedule for jacobi_2d: flow dependence on array 'B' from S0")
    assert main(["codegen", f"{KERNELS}::jacobi_2d", "--target", "c", "--schedule", str(tmp_path / "missing.txt")]) == 1
    assert "cannot read it" in capsys.readouterr().err
