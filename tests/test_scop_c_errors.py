"""Rejected C: every unsupported or malformed construct is a SourceError at the user's line, naming the
construct, with no trace of polyfuse's or pycparser's internals."""

import re

import pytest

import polyfuse as pf

HEAD = "#define N 64\nvoid k(int n, double A[N][N], double B[N], double *P, double alpha) {\n  int i, j;\n#pragma scop\n"
TAIL = "#pragma endscop\n}\n"
LOOP = "  for (i = 0; i < n; i++)"  # line 5; a body on line 6


def scop(*lines: str) -> str:
    """A kernel whose SCoP holds ``lines`` starting at line 5."""
    return HEAD + "".join(line + "\n" for line in lines) + TAIL


CASES = [
    # (id, source, line, text the message must hold)
    ("non-affine product", scop(LOOP, "    for (j = 0; j < n; j++)", "      B[i * j] = 0.0;"), 7, "`i * j` is not affine"),
    ("indirect subscript", scop(LOOP, "    A[i][(int) B[i]] = 1.0;"), 6, "reads an array element"),
    ("pointer arithmetic", scop(LOOP, "    *(P + i) = 1.0;"), 6, "cannot assign to `*(P + i)`"),
    ("pointer parameter", scop(LOOP, "    P[i] = 1.0;"), 6, "`P` is a pointer"),
    ("unknown call", scop(LOOP, "    B[i] = foo(A[i][i]);"), 6, "call to `foo` is not supported"),
    ("printf", scop(LOOP, '    printf("%f", B[i]);'), 6, "the call `printf"),
    ("while", scop("  while (n > 0)", "    B[0] = 1.0;"), 5, "a while loop is not allowed"),
    ("break", scop(LOOP + " {", "    if (i > 3) break;", "  }"), 6, "break is not allowed"),
    ("return", scop("  return;"), 5, "return is not allowed"),
    ("goto", scop("  goto out;"), 5, "goto is not allowed"),
    ("switch", scop("  switch (n) { default: B[0] = 0.0; }"), 5, "switch is not allowed"),
    ("non-constant step", scop("  for (i = 0; i < n; i += n)", "    B[i] = 0.0;"), 5, "is not a constant step"),
    ("wrong-way condition", scop("  for (i = 0; i > n; i++)", "    B[i] = 0.0;"), 5, "does not bound it from above"),
    ("struct access", "struct S { double x; };\nvoid k(int n, struct S s, double B[n]) {\n#pragma scop\n"
                      "  for (int i = 0; i < n; i++)\n    B[i] = s.x;\n#pragma endscop\n}\n", 5, "struct member access `s.x`"),
    ("increment inside an expression", scop(LOOP, "    B[i] = B[i]++;"), 6, "increments inside an expression"),
    ("data-dependent if", scop(LOOP, "    if (B[i] > 0.0) B[i] = 0.0;"), 6, "`B[i]` reads an array"),
    ("assign to scalar param", scop("  alpha = 2.0;"), 5, "cannot assign to the scalar parameter `alpha`"),
    ("assign to size", scop("  n = 3;"), 5, "cannot assign to the size parameter `n`"),
    ("wrong rank", scop(LOOP, "    B[i][i] = 1.0;"), 6, "array `B` has 1 dimension but `B[i][i]` gives 2 subscripts"),
    ("loop var modified", scop(LOOP, "    i = 3;"), 6, "cannot assign to the loop variable `i`"),
    ("float subscript", scop(LOOP, "    B[i / 2.0] = 1.0;"), 6, "`i / 2.0` is not affine"),
    ("modulo by variable", scop(LOOP, "    B[i % n] = 1.0;"), 6, "needs a non-zero integer constant"),
    ("unknown name", scop(LOOP, "    B[i] = zzz;"), 6, "unknown name `zzz`"),
    ("bitwise complement", scop(LOOP, "    B[i] = (double) (~i);"), 6, "operator `~`"),
    ("bitwise and of doubles", scop(LOOP, "    B[i] = B[i] & 3;"), 6, "`&` of floating-point values"),
    ("missing endscop", HEAD + LOOP + "    B[i] = 0.0;\n}\n", 4, "no matching `#pragma endscop`"),
    ("syntax error", scop(LOOP, "    B[i] = 1.0 +;"), 6, "C syntax error"),
    ("syntax error, missing semicolon", scop(LOOP, "    B[i] = 1.0", "  B[0] = 2.0;"), 7, "C syntax error"),
    ("preprocessor error", "#include \"no_such_header.h\"\nvoid k(void) {}\n", 1, "no_such_header.h"),
    ("compound modulo assignment of doubles", scop(LOOP, "    B[i] %= 2.0;"), 6, "`%` of floating-point values"),
    # unsigned elements are supported with C's meaning (tests/test_c_unsigned.py); long double is not
    ("long double elements", "void k(int n, long double U[n]) {\n#pragma scop\n  for (int i = 0; i < n; i++)\n"
                             "    U[i] = U[i] / 3;\n#pragma endscop\n}\n", 4, "an array of `long double` elements"),
]


@pytest.mark.parametrize("source, line, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejected_construct(source: str, line: int, fragment: str):
    with pytest.raises(pf.SourceError) as info:
        pf.from_c(source)
    message = str(info.value)
    assert info.value.line == line, message
    assert f"<string>:{line}:" in message
    assert fragment in message, message
    assert "Traceback" not in message and "pycparser" not in message
    assert not re.search(r"polyfuse[/\\]", message) and ".py" not in message


def test_error_in_a_file_points_at_the_original_line_after_macros(tmp_path):
    path = tmp_path / "kernel.c"
    path.write_text("#include <math.h>\n#define IDX(a, b) ((a) * (b))\n#define N 8\n"
                    "void k(double A[N * N]) {\n#pragma scop\n  for (int i = 0; i < N; i++)\n"
                    "    for (int j = 0; j < N; j++)\n      A[IDX(i, j)] = sqrt(2.0);\n#pragma endscop\n}\n")
    with pytest.raises(pf.SourceError) as info:
        pf.from_c(str(path))
    e = info.value
    assert (e.filename, e.line) == (str(path), 8)
    assert "A[IDX(i, j)] = sqrt(2.0);" in str(e)  # the user's line, as written
    assert "`i * j`" in str(e) and "is not affine" in str(e)


def test_caret_under_the_construct():
    with pytest.raises(pf.SourceError) as info:
        pf.from_c(scop(LOOP, "    B[i] = foo(A[i][i]);"))
    lines = str(info.value).splitlines()
    source, caret = lines[-2], lines[-1]
    assert source.strip() == "B[i] = foo(A[i][i]);"
    assert source[caret.index("^"):].startswith("foo(")


def test_missing_file_and_bad_function():
    with pytest.raises(pf.SourceError, match="no such C file"):
        pf.from_c("/nonexistent/kernel.c")
    with pytest.raises(pf.SourceError, match="no function named 'nope'"):
        pf.from_c(scop(LOOP, "    B[i] = 0.0;"), function="nope")


def test_assume_errors_point_into_the_assume_text():
    src = "void f(int n, double A[n]) { for (int i = 0; i < n; i++) A[i] = 1.0; }"
    with pytest.raises(pf.SourceError) as info:
        pf.from_c(src, assume="n >= k")
    assert (info.value.filename, info.value.line, info.value.col) == ("<assume>", 1, 5)
    assert "unknown name `k`" in str(info.value)
    with pytest.raises(pf.SourceError, match="C syntax error"):
        pf.from_c(src, assume="n >= ")
