"""The fuzz harness's own checks must fail when their fault is present: a dependence relation whose meaning
changed while the variants were scheduled (``harness._check_dependences_kept``)."""

from __future__ import annotations

import pytest

from tests.fuzz import harness

SOURCE = '''
import polyfuse as pf

N = pf.params('N')


@pf.program(assume="N >= 2")
def fuzzed(A: pf.f32[N]):
    for i in range(1, N):
        A[i] = A[i - 1] + A[i]
'''


@pytest.fixture
def program_and_texts():
    prog = harness.load_source(SOURCE)
    return prog, harness._dependence_texts(prog)


def test_unchanged_dependences_pass(program_and_texts):
    prog, before = program_and_texts
    harness._check_dependences_kept(prog, before, {"N": 6})


def test_the_same_relation_written_differently_passes(program_and_texts):
    """isl may drop a redundant constraint of a shared map in place: the text changes, the meaning does not."""
    prog, before = program_and_texts
    kind, source, sink, array, text = before[0]
    rewritten = text.replace("}", " and N >= 0 }")
    assert rewritten != text
    harness._check_dependences_kept(prog, [(kind, source, sink, array, rewritten), *before[1:]], {"N": 6})


@pytest.mark.parametrize("extra", ["i >= 2", "N >= 100"])
def test_a_relation_that_changed_meaning_fails(program_and_texts, extra):
    """Both a change seen at the fuzzed sizes (``i >= 2``) and one seen only symbolically (``N >= 100``)."""
    prog, before = program_and_texts
    kind, source, sink, array, text = before[0]
    narrowed = text.replace("}", f" and {extra} }}")
    with pytest.raises(AssertionError, match="changed meaning"):
        harness._check_dependences_kept(prog, [(kind, source, sink, array, narrowed), *before[1:]], {"N": 6})
