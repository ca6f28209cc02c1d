"""The GPU proof's plan (issue 53): its parts in order of value, each with its phases' seconds from the second loan of
an H200 (``benchmarks/results/gpu-2026-11-29``, docs/development/benchmarks.md gives each number's basis), and the
arithmetic of the calls that run them: every part over two loans, one call of at most 9 minutes each.

  python benchmarks/gpu_proof.py --plan    # the two calls' seconds per part
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """One part of the proof: its phases with their planned seconds (from the 2026-11-29 H200 run where it measured
    them: docs/development/benchmarks.md gives each number's basis), the phase its minimum runs through, the steady
    GRPO step its deadline expects (``step_s``) and, for ``a100-peft``, the seconds continuous batching needs."""

    name: str
    phases: tuple[tuple[str, int], ...]
    through: str
    step_s: int = 0
    cb_s: int = 0

    @property
    def planned_s(self) -> int:
        """All its phases' seconds."""
        return sum(s for _, s in self.phases)

    @property
    def min_s(self) -> int:
        """The seconds it needs to be worth starting: its phases up to and including :attr:`through` (its start, its
        model built or loaded, and its first step)."""
        labels = [label for label, _ in self.phases]
        return sum(s for _, s in self.phases[:labels.index(self.through) + 1])


#: The parts in order of value. The first call of a loan runs from the top; the next loan's call runs what is left.
PLAN: list[Part] = [
    Part("machine", (("start, versions, driver", 5), ("copy bandwidth", 3)), "copy bandwidth"),
    Part("a100-unsloth-4bit", (("start: import Unsloth", 20), ("save the random 8B model", 25),
                               ("load it in 4 bits", 14), ("trainer, and what the row does not time", 20),
                               ("step 1: compilation", 68), ("step 2", 7), ("exit: caches written", 5)),
         "step 1: compilation", step_s=7),
    Part("a100-peft", (("start", 10), ("build the 8B model in bf16", 10), ("step 1", 35), ("step 2", 20),
                       ("continuous batching: 2 calls", 37), ("exit", 5)), "step 1", step_s=20, cb_s=37),
    Part("a100-unsloth-16bit", (("start: import Unsloth", 20), ("load the saved 8B model in 16 bits", 11),
                                ("trainer, and what the row does not time", 16), ("step 1: caches warm", 28),
                                ("step 2", 6), ("exit", 5)), "step 1: caches warm", step_s=6),
    Part("eval", (("start", 8), ("build the 1.5B model", 2), ("batch 1 of 32 x 256 tokens", 13), ("batch 2", 12),
                  ("exit", 5)), "batch 1 of 32 x 256 tokens"),
    Part("pipeline-smoke", (("start: import Unsloth, build and save the random model", 32), ("02 measure_before", 11),
                            ("03 train: step 1 compiles", 64), ("04 measure_after", 9),
                            ("04 export: merged, verified", 27), ("exit", 5)), "03 train: step 1 compiles"),
    Part("colab-t4", (("start: import Unsloth", 20), ("save the random 3B model in fp16", 10), ("load it in 4 bits", 6),
                      ("trainer, and what the row does not time", 20), ("step 1: compilation in fp16", 70),
                      ("step 2", 7), ("exit", 5)), "step 1: compilation in fp16", step_s=7),
    Part("full-80gb", (("start", 10), ("build the 1.5B model in fp32", 13), ("step 1", 40), ("step 2", 18),
                       ("the final checkpoint (the trainer saves at its end), exit", 45)), "step 1", step_s=18),
]
PARTS = {part.name: part for part in PLAN}
#: A loan's first call: its ``timeout_s`` and the proof's budget inside it (the bundle's check and install, a few
#: seconds on the H200, before; packing the caches, at most 16 MiB, after).
CALL_TIMEOUT_S, BUDGET_S = 540, 510
#: A second call on the same warm machine, when the loan's device time allows: what the first left unfinished.
RERUN_TIMEOUT_S, RERUN_BUDGET_S = 180, 150


def simulate(names: list[str], budget: float) -> tuple[list[str], list[str]]:
    """The parts of ``names`` a call with ``budget`` seconds runs to their end if each takes its planned seconds, in
    order, each started only with its minimum left; and the rest (not started, or started and stopped short)."""
    left, done, rest = budget, [], []
    for name in names:
        part = PARTS[name]
        if left >= part.min_s:
            (done if left >= part.planned_s else rest).append(name)
            left -= min(left, part.planned_s)
        else:
            rest.append(name)
    return done, rest


def planned_calls(budget: float = BUDGET_S, loans: int = 2) -> list[list[str]]:
    """The calls the plan needs, one per loan, each a list of the parts it runs to their end (``machine`` in each:
    a loan is a new machine). Stops after ``loans`` calls; parts still left out are not in any list."""
    left = [p.name for p in PLAN if p.name != "machine"]
    calls = []
    for _ in range(loans):
        done, left = simulate(["machine"] + left, budget)
        calls.append(done)
        if not left:
            break
    return calls


def print_plan() -> None:
    """The two calls with each part's planned seconds, minimum and phases (the table on the benchmarks page)."""
    for i, names in enumerate(planned_calls(), 1):
        print(f"call {i}: {sum(PARTS[n].planned_s for n in names)} s of its {BUDGET_S} s budget "
              f"(timeout_s {CALL_TIMEOUT_S})")
        for name in names:
            part = PARTS[name]
            phases = ", ".join(f"{label} {s}" for label, s in part.phases)
            print(f"  {name}: {part.planned_s} s, starts with at least {part.min_s} s left ({phases})")


#: A part's deadline comes this long before it is killed: time to exit normally and write its caches (each part's
#: last phase, ``exit``, plans this long).
EXIT_S = 5


def child_timeout(name: str, left: float, reserved: float) -> float:
    """A part's time limit: its planned seconds, plus what the parts before it saved (what is left beyond the
    ``reserved`` planned seconds of the parts still expected in this call), never more than is left."""
    return min(left, max(PARTS[name].planned_s, left - reserved))
