"""``pf.compile``: a Program through the whole pipeline to something callable on numpy arrays.

The pipeline is one list of named stages (:data:`STAGES`), each a function from the value before it to the
next; :class:`Compiled` holds every stage's value so each can be printed on its own::

    frontend     Program         (the value the user wrote; checked to be a Program)
    dependences  Dependences     program.dependences()
    schedule     Schedule        pf.schedule(program, target, fusion, tile, params, ...)
    codegen      Code            polyfuse.codegen.codegen(schedule)
    load         callable        the C runtime (cc + ctypes), the CUDA runtime or the CUDA simulator

An :class:`Executable` runs the pipeline once per distinct set of sizes (sizes are inferred from the
arguments at call time, or given up front with ``params=``), so schedules and tile choices may depend on the
sizes; compiled shared libraries are also cached on disk, so a second process pays no compiler run.

With ``tune=K`` (autotuning, :mod:`polyfuse.runtime.tuning`) each specialisation's schedule stage is
replaced by a choice among the traffic model's K best tile shapes, each built and timed on the device;
the winner is cached on disk per program, sizes, device and K.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from polyfuse import progress
from polyfuse.codegen import codegen
from polyfuse.codegen.code import Code
from polyfuse.errors import CodegenError, PolyfuseError, RuntimeUnavailable, api_boundary
from polyfuse.ir.program import Program
from polyfuse.runtime import cpu, cuda_sim, tuning
from polyfuse.runtime import profile as profiling
from polyfuse.runtime.args import Binder, Bound, check_params
from polyfuse.runtime.profile import Profile
from polyfuse.runtime.repeat import LastCall
from polyfuse.schedule import schedule as schedule_program
from polyfuse.schedule.model import Schedule

try:
    import polyfuse.runtime.cuda as cuda_runtime
except ModuleNotFoundError as e:  # the CUDA runtime is optional (and pycuda with it)
    if e.name not in ("polyfuse.runtime.cuda", "pycuda"):
        raise
    cuda_runtime = None

TARGETS = ("c", "cuda", "cuda-sim", "auto")
SCHEDULE_OPTIONS = ("fusion", "tile", "params", "schedule", "isl_budget", "reassociate", "parallel")


@dataclass(frozen=True, eq=False)
class Compiled:
    """Every stage's value for one specialisation; ``function(*values)`` takes ``code.signature`` order."""

    program: Program
    dependences: Any
    schedule: Schedule
    code: Code
    function: Callable[..., None]
    sizes: Mapping[str, int]

    def dump(self) -> str:
        """Each stage's value as text, in pipeline order."""
        parts = [("frontend", str(self.program)), ("dependences", str(self.dependences)),
                 ("schedule", str(self.schedule)), ("codegen", self.code.text)]
        return "\n".join(f"==== {name} ====\n{text}" for name, text in parts)


def resolve_target(target: str) -> str:
    """``"c"``, ``"cuda"`` or ``"cuda-sim"``; ``"auto"`` means CUDA when a GPU and pycuda are usable, else C."""
    if target not in TARGETS:
        raise PolyfuseError(f"unknown target {target!r}: expected one of {', '.join(TARGETS)}")
    if target != "auto":
        return target
    return "cuda" if cuda_runtime is not None and cuda_runtime.available() else "c"


def _load(code: Code, target: str | None = None) -> Callable[..., None]:
    if code.target == "c":
        return cpu.CFunction(code)
    if target == "cuda-sim":
        return cuda_sim.load(code)
    if cuda_runtime is None:
        raise RuntimeUnavailable("the CUDA runtime is not available (pycuda is not installed)")
    return cuda_runtime.load(code)


def _schedule(program: Program, target: str, options: Mapping[str, Any], sizes: Mapping[str, int]) -> Schedule:
    """The schedule stage: the scheduler at the given sizes (symbolic when there are none)."""
    if sizes:
        options = {**options, "params": dict(sizes)}
    return schedule_program(program, target=code_target(target), **options)


def code_target(target: str) -> str:
    """The target code is generated for: the simulator runs the CUDA that the GPU would."""
    return "cuda" if target == "cuda-sim" else target


STAGES: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("frontend", lambda source, **_: source),
    ("dependences", lambda program, **_: program.dependences()),
    ("schedule", lambda program, target, options, sizes, **_: _schedule(program, target, options, sizes)),
    ("codegen", lambda schedule, **_: codegen(schedule)),
    ("load", lambda code, target, **_: _load(code, target)),
)
"""The pipeline, in order: (stage name, function of the values computed so far)."""


STEP_LABELS = {"frontend": "reading the program", "dependences": "dependence analysis", "schedule": "scheduling",
               "codegen": "code generation", "load": "compiling the code"}
"""What a progress line says each stage is doing (:mod:`polyfuse.progress`)."""


def run_pipeline(program: Program, target: str, options: Mapping[str, Any], sizes: Mapping[str, int]) -> Compiled:
    """Run every stage of :data:`STAGES` for ``program`` at ``sizes`` (empty: symbolic sizes)."""
    values: dict[str, Any] = {"source": program, "target": target, "options": dict(options), "sizes": dict(sizes)}
    names = {"frontend": "program", "dependences": "dependences", "schedule": "schedule", "codegen": "code", "load": "function"}
    for stage, run in STAGES:
        progress.step(STEP_LABELS[stage] if stage != "load" else {"cuda": "nvcc", "cuda-sim": "g++ (CUDA simulator)"}.get(target, "the C compiler"))
        values[names[stage]] = run(**values)
    return Compiled(values["program"], values["dependences"], values["schedule"], values["code"], values["function"], dict(sizes))


class PreparedCall:
    """The program bound to one set of arrays (:meth:`Executable.prepare`): ``call()`` runs it on them again
    and returns what :meth:`Executable.__call__` would. The arrays must stay as they were when bound (same
    memory, shapes and dtypes): they are not checked again."""

    __slots__ = ("_run", "_returned", "_keep")

    def __init__(self, run: Callable[[], None], returned: Any, keep: Any) -> None:
        self._run, self._returned, self._keep = run, returned, keep  # keep: what the call's addresses point into

    def __call__(self) -> Any:
        self._run()
        return self._returned


class Executable:
    """A compiled program: ``y = exe(a, b)`` or ``exe(A=a, B=b, T=10)`` runs it (see :meth:`__call__`).

    Each distinct set of sizes is specialised once (schedule, code, loaded function and temporary buffers)
    and reused. ``code`` and ``schedule`` are those of the sizes given with ``params=`` at compile time, else
    of the most recent call, else of a symbolic (size-generic) compilation made on first access.
    """

    def __init__(self, program: Program, target: str, options: Mapping[str, Any], tune: int = 0,
                 threads: int | None = None) -> None:
        self.program = program
        self.threads = threads  # C: OpenMP threads for every call (None: OpenMP's default)
        self.target = target
        self._given = dict(options)  # as passed (params included): what a pickle rebuilds from
        self.options = {k: v for k, v in options.items() if k != "params"}
        if threads == 1 and target == "c":  # the scheduler may trade parallel loops for locality
            self.options["threads"] = 1
        self.tune = tune
        self._specialisations: dict[tuple[tuple[str, int], ...], tuple[Compiled, dict[str, np.ndarray]]] = {}
        self._latest: Compiled | None = None
        self._buffers: list[dict[str, np.ndarray]] = []
        self._profiled: dict[tuple[tuple[str, int], ...], profiling.ProfiledC] = {}
        self._binder = Binder(program, device_arrays=target == "cuda", allocate=True)
        self._last_call: LastCall | None = None  # the previous call's binding, replayed when repeated
        self._previous_objects: tuple | None = None  # CUDA: the previous call's arguments (count, names, ids)
        params = options.get("params")
        if params:
            self._latest = self.specialise(params)

    @api_boundary
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run on the program's arguments, positional in signature order or by name, and sizes by name.

        Arrays may be numpy arrays or anything exposing ``__array_interface__``, DLPack or (CUDA)
        ``__cuda_array_interface__``, used without a copy. Outputs not passed are allocated. Returns the
        arrays the program writes, in signature order (the caller's own objects where passed, written in
        place): one array, a tuple of them, or None when it writes none.
        """
        last = self._last_call
        if last is not None and last.matches(args, kwargs):  # the same arrays again: no checks (runtime/repeat.py)
            self._previous_objects = None  # (a bound call that follows is not a repeat of the one before it)
            self._latest = last.compiled
            last.run()
            return last.returned(args, kwargs)
        bound = self._binder(args, kwargs)
        compiled, temporaries = self._get(bound.key)
        self._latest = compiled
        values = self._values(compiled.code, bound, temporaries)
        if self.target == "c" and LastCall.possible(args, kwargs, self._binder.written, self.program.arguments):
            run = compiled.function.bound(values, self.threads)
            self._last_call = LastCall(args, kwargs, self._binder.written, self.program.arguments, run, compiled)
            run()
        elif self.target == "cuda" and LastCall.possible(args, kwargs, self._binder.written, self.program.arguments, device=True):
            # remembered from the second call on the same objects: packing a call's launches costs more than
            # making them, which code passing new tensors at every call would pay for nothing
            objects = (len(args), tuple(kwargs), tuple(map(id, chain(args, kwargs.values()))))
            run = compiled.function.bound(*values) if objects == self._previous_objects else None
            self._previous_objects = objects
            if run is None:
                compiled.function(*values)
            else:
                self._last_call = LastCall(args, kwargs, self._binder.written, self.program.arguments, run, compiled)
                run()
        elif self.threads and self.target == "c":
            compiled.function.call_in_team(values, self.threads)
        else:
            compiled.function(*values)
        return bound.returned

    @api_boundary
    def prepare(self, *args: Any, **kwargs: Any) -> PreparedCall:
        """Bind the arguments once, as :meth:`__call__` would, and return a :class:`PreparedCall` that runs
        the program on those same arrays again and again with no per-call checks: for kernels called in a
        loop, where binding (about 5 microseconds) would count. Outputs not passed are allocated once."""
        bound = self._binder(args, kwargs)
        compiled, temporaries = self._get(bound.key)
        self._latest = compiled
        values = self._values(compiled.code, bound, temporaries)
        if self.target == "c":
            run = compiled.function.bound(values, self.threads)
        elif self.target == "cuda" and (packed := compiled.function.bound(*values)) is not None:
            run = packed  # on device arrays: the launches packed once (numpy arrays are copied at each call)
        else:
            def run() -> None:
                compiled.function(*values)
        # kept alive with it: the executable (its temporary buffers are passed by address) and the arrays
        return PreparedCall(run, bound.returned, (self, bound.arrays, temporaries))

    @api_boundary
    def profile(self, *args: Any, **kwargs: Any) -> Profile:
        """Run once like :meth:`__call__` (outputs written in place) and return the time of each kernel,
        per launch and in all, next to its modelled bytes (:class:`polyfuse.runtime.profile.Profile`;
        ``print()`` it for a table). The C target runs an instrumented build of the same code."""
        bound = self._binder(args, kwargs)
        compiled, temporaries = self._get(bound.key)
        self._latest = compiled
        names = [k.name for k in compiled.schedule.kernels]
        values = self._values(compiled.code, bound, temporaries)
        seconds = dict.fromkeys(names, 0.0)
        launches = dict.fromkeys(names, 0)
        start = time.perf_counter()
        if self.target == "c":
            profiled = self._profiled.get(bound.key)
            if profiled is None:
                profiled = self._profiled[bound.key] = profiling.ProfiledC(compiled.code, names)
            start = time.perf_counter()
            profiled(*values)
            for name, (t, n) in zip(names, profiled.read()):
                seconds[name], launches[name] = t, n
        else:
            def timer(function: str, t: float) -> None:
                name = names[int(re.search(r"_k(\d+)(?:_\d+)?$", function).group(1))]
                seconds[name] += t
                launches[name] += 1

            compiled.function(*values, timer=timer)
        total = time.perf_counter() - start
        model = profiling.modelled_bytes(compiled.schedule, names)
        kernels = tuple(profiling.KernelTime(k.name, tuple(k.statements), launches[k.name], seconds[k.name], model[k.name])
                        for k in compiled.schedule.kernels)
        return profiling.Profile(self.program.name, self.target, dict(bound.sizes), total, kernels)

    @api_boundary
    def specialise(self, sizes: Mapping[str, int]) -> Compiled:
        """The pipeline's values for ``sizes`` (compiled on first use, then cached)."""
        return self._get(sizes)[0]

    @property
    def compiled(self) -> Compiled:
        if self._latest is None:
            self._latest = run_pipeline(self.program, self.target, self.options, {})
        return self._latest

    @property
    def code(self) -> Code:
        return self.compiled.code

    @property
    def schedule(self) -> Schedule:
        return self.compiled.schedule

    def _get(self, sizes: Mapping[str, int] | tuple[tuple[str, int], ...]) -> tuple[Compiled, dict[str, Any]]:
        key = sizes if isinstance(sizes, tuple) else tuple(sorted((k, int(v)) for k, v in sizes.items()))
        entry = self._specialisations.get(key)
        if entry is None:
            entry = self._install(key, self._build(dict(key)))
        return entry

    def _install(self, key: tuple[tuple[str, int], ...], compiled: Compiled) -> tuple[Compiled, dict[str, Any]]:
        """Keep ``compiled`` as the specialisation for the sizes ``key``, with its temporary buffers."""
        temporaries: dict[str, Any] = {
            name: np.empty(self.program.arrays[name].concrete_shape(dict(key)), self.program.arrays[name].dtype.numpy)
            for name in compiled.code.temporaries
        }
        if self.target == "c":  # passed by address, like the arguments (the arrays stay alive in _buffers)
            self._buffers.append(temporaries)
            temporaries = {name: a.ctypes.data for name, a in temporaries.items()}
        entry = self._specialisations[key] = (compiled, temporaries)
        return entry

    @progress.reported("compiling")
    def _build(self, sizes: Mapping[str, int]) -> Compiled:
        if not self.tune:
            return run_pipeline(self.program, self.target, self.options, sizes)
        return tuning.tune(self.program, self.target, self.options, sizes, self.tune,
                           build=lambda options: run_pipeline(self.program, self.target, options, sizes))

    def _values(self, code: Code, bound: Bound, temporaries: Mapping[str, Any]) -> list[Any]:
        """The entry point's arguments in ``code.signature`` order; for C, arrays by address (checked by
        the binder), so the call converts nothing."""
        arrays = bound.addresses if self.target == "c" else bound.arrays
        out: list[Any] = []
        for arg in code.signature:
            if arg.kind == "size":
                out.append(bound.sizes[arg.name])
            elif arg.kind == "scalar":
                out.append(bound.scalars[arg.name])
            elif arg.name in arrays:
                out.append(arrays[arg.name])
            elif arg.name in temporaries:
                out.append(temporaries[arg.name])
            else:
                raise CodegenError(f"the generated code takes {arg.name!r}, which is neither an argument nor a temporary")
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what it was compiled from: a process that loads it specialises again on first use
        (the compiled libraries come from the on-disk cache, so no compiler runs)."""
        return Executable, (self.program, self.target, self._given, self.tune, self.threads)

    def __repr__(self) -> str:
        return f"<pf.Executable {self.program.name} target={self.target} specialisations={len(self._specialisations)}>"


@api_boundary
def compile(program: Program, target: str = "auto", tune: int | None = None, threads: int | None = None,  # noqa: A001
            **schedule_options: Any) -> Executable:
    """Compile ``program`` for ``target`` (``"c"``, ``"cuda"``, ``"cuda-sim"`` or ``"auto"``).

    ``"cuda-sim"`` runs the CUDA that ``"cuda"`` generates on the CPU, in a simulator that reports data
    races, out-of-bounds indices and barriers not every thread reaches (:mod:`polyfuse.runtime.cuda_sim`):
    slow, for checking and debugging CUDA without a GPU.

    ``schedule_options`` are those of :func:`polyfuse.schedule.schedule`: ``fusion``, ``tile``, ``schedule``
    and ``params`` (sizes to specialise for now; without them each call's sizes are specialised on first use).

    ``tune=K`` (an int >= 1; ``None`` or 0: off) autotunes: for each specialisation (at ``params`` now, or at
    each call's sizes on first use) the traffic model's K best tile choices are built and timed on the
    device and the fastest kept, cached on disk per program, sizes, device and K (a later compile with the
    same key times nothing). Tuning replaces ``tile`` (leave it ``"auto"``). CUDA needs a usable GPU
    (:class:`RuntimeUnavailable` otherwise); on C the candidates are timed on the CPU. ``"auto"`` resolves
    first, so without a GPU it tunes the C code.

    ``threads`` (C): the number of OpenMP threads every call runs with (``None``: OpenMP's default,
    ``OMP_NUM_THREADS`` or every core); the calling thread's own setting is restored after each call.
    ``reassociate`` (default ``True``): see :func:`polyfuse.schedule.schedule`.
    """
    if not isinstance(program, Program):
        raise PolyfuseError(f"pf.compile expects a pf.Program (a @pf.program function), got {type(program).__name__}")
    unknown = set(schedule_options) - set(SCHEDULE_OPTIONS)
    if unknown:
        raise PolyfuseError(f"unknown option(s) {', '.join(sorted(unknown))} for pf.compile: expected {', '.join(SCHEDULE_OPTIONS)}")
    check_params(program, schedule_options.get("params"))
    k = tuning.check_tune(tune)
    resolved = resolve_target(target)
    if k:
        if schedule_options.get("tile", "auto") != "auto":
            raise PolyfuseError(f"tune={k} chooses the tile sizes itself: leave tile='auto' (got tile={schedule_options['tile']!r})")
        if resolved == "cuda-sim":
            raise PolyfuseError(f"tune={k} times candidates on a device; the CUDA simulator's times say nothing about a GPU")
        tuning.require_device(resolved)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise PolyfuseError(f"threads= must be a positive int (or None for OpenMP's default), not {threads!r}")
    return Executable(program, resolved, schedule_options, k, threads)


def compile_schedule(sched: Schedule, threads: int | None = None) -> Executable:
    """An executable that runs ``sched`` exactly as it is at its sizes (``sched.params``, every size
    given): no scheduler run, for a schedule computed in another process or unpickled (an explicit
    ``schedule=`` is mapped and tiled again). At other sizes, or when ``sched`` is symbolic, each call's
    sizes are specialised from the schedule's text as an explicit schedule (legality-checked, then
    mapped: no fusion search); a pickle of the executable does the same."""
    if not isinstance(sched, Schedule):
        raise PolyfuseError(f"compile_schedule expects a pf.Schedule, got {type(sched).__name__}")
    sizes = dict(sched.params)
    options: dict[str, Any] = {"reassociate": sched.reassociate, "schedule": sched.to_text()}
    exe = Executable(sched.program, sched.target, options, 0, threads)
    if all(p in sizes for p in sched.program.params):
        exe._given["params"] = sizes
        code = codegen(sched)
        compiled = Compiled(sched.program, sched.program.dependences(), sched, code, _load(code), sizes)
        exe._install(tuple(sorted(sizes.items())), compiled)
        exe._latest = compiled
    return exe
