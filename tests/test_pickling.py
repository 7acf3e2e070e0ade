"""``Program``, ``Schedule`` and ``Executable`` pickle (issue 13): to cache them and to ship work to other
processes. Each comes back equal in what it computes: same dependences, same code, same results."""

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyfuse as pf
from examples.kernels import add_exp, gemm, jacobi_2d

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("prog", [add_exp, gemm, jacobi_2d], ids=lambda p: p.name)
def test_program_round_trip(prog):
    back = pickle.loads(pickle.dumps(prog))
    assert back.name == prog.name and back.arguments == prog.arguments and back.params == prog.params
    assert back.context.is_equal(prog.context)
    assert [s.domain.is_equal(t.domain) for s, t in zip(back.statements, prog.statements)] == [True] * len(prog.statements)
    assert back.schedule.get_map().is_equal(prog.schedule.get_map())
    for kind in ("flow", "anti", "output"):
        assert getattr(back.dependences(), kind).is_equal(getattr(prog.dependences(), kind))
    a = {n: np.random.default_rng(1).uniform(1, 2, prog.arrays[n].concrete_shape({p: 7 for p in prog.params})).astype(prog.arrays[n].dtype.numpy)
         for n in prog.arguments if n in prog.arrays}
    b = {k: v.copy() for k, v in a.items()}
    extra = {**{n: 1.5 for n in prog.scalars}, **({"T": 2} if "T" in prog.params else {})}
    pf.reference(prog)(**a, **extra)
    pf.reference(back)(**b, **extra)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_schedule_round_trip_gives_the_same_code(target):
    sched = pf.schedule(gemm, target=target, params={"N": 64, "K": 48, "M": 32})
    back = pickle.loads(pickle.dumps(sched))
    assert back.explain() == sched.explain()
    assert [k.name for k in back.kernels] == [k.name for k in sched.kernels] and back.contracted == sched.contracted
    assert back.to_text() == sched.to_text()
    assert pf.codegen(back).text == pf.codegen(sched).text  # needs the kernel marks' Kernel objects back


SHIPPED = """
import pickle, sys
import numpy as np
exe, a = pickle.load(sys.stdin.buffer)
sys.stdout.buffer.write(pickle.dumps(exe(a)))
"""


def test_executable_runs_in_another_process():
    exe = pf.compile(add_exp, target="c", params={"N": 6, "M": 5})
    a = np.random.default_rng(0).uniform(0.5, 1.5, (6, 5)).astype(np.float32)
    want = exe(a)
    out = subprocess.run([sys.executable, "-c", SHIPPED], input=pickle.dumps((exe, a)), capture_output=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
    np.testing.assert_array_equal(pickle.loads(out.stdout), want)
    assert repr(pickle.loads(pickle.dumps(exe))) == "<pf.Executable add_exp target=c specialisations=1>"


def test_compile_schedule_runs_an_unpickled_schedule_as_it_is():
    from polyfuse.compile import compile_schedule

    sizes = {"N": 37, "M": 29}
    sched = pickle.loads(pickle.dumps(pf.schedule(add_exp, target="c", params=sizes)))
    exe = compile_schedule(sched)
    assert exe.code.text == pf.codegen(sched).text
    a = np.random.default_rng(0).uniform(-1, 1, (37, 29)).astype(np.float32)
    c = np.zeros_like(a)
    want = c.copy()
    exe(A=a, C=c, **sizes)
    pf.reference(add_exp)(A=a, C=want, **sizes)
    np.testing.assert_allclose(c, want, rtol=1e-6)
