"""Worst-case time of every reward function and extraction rule on adversarial completions.

A reward runs on every completion of every GRPO step, and a policy under training writes whatever
it is paid for: a regular expression that backtracks quadratically turns one long completion into
minutes of a stalled run. This times each reward and each extraction rule on a corpus of crafted
inputs (repeated opening tags without their closing ones, tag soup, digit runs, thousands
separators, signs, boxes, long reasoning blocks) at a given size, and prints the slowest input per
function. math-verify correctness runs under its own per-check timeout (``grpo_kit.tasks.math_verify``) and
is left out.

Run: .venv/bin/python benchmarks/reward_worst_case.py [--kib 1024] [--repeat 3]
Target (issue 12): at most 50 ms per 1 MiB completion for every function. `tests/runs/test_bad_input.py`
keeps a 100 KiB version in `make test`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from grpo_kit.tasks import BUILTIN_REWARDS, TASKS
from grpo_kit.tasks.answer_format import extract_final_answer, extract_xml_answer, is_strict_format
from grpo_kit.tasks.countdown import countdown_answer

#: name -> one piece, repeated to the wanted size (a prefix or suffix where the shape needs one).
PATTERNS: dict[str, tuple[str, str, str]] = {
    "<answer> never closed": ("", "<answer>", ""),
    "<answer> then text": ("", "<answer> 1+2 ", ""),
    "</answer> only": ("", "</answer>", ""),
    "reasoning opened, closers, no answer": ("<reasoning>", "</reasoning>", ""),
    "reasoning closers then answer opener": ("<reasoning>", "</reasoning> <answer>", ""),
    "strict separators, no final tag": ("<reasoning>\n", "\n</reasoning>\n<answer>\n", ""),
    "strict separators, bad tail": ("<reasoning>\n", "\n</reasoning>\n<answer>\n", "\n</answer>x"),
    "newlines": ("<reasoning>\n", "\n", ""),
    "digits": ("", "1", ""),
    "thousands groups": ("", "1,000", ""),
    "signs and dollars": ("", "-$", ""),
    "numbers and spaces": ("", "12 ", ""),
    "decimals": ("", "1.5 ", ""),
    "boxed never closed": ("", "\\boxed{", ""),
    "braces": ("\\boxed{", "{", ""),
    "tag soup": ("", "<reasoning><answer></reasoning></answer>\n", ""),
    "one huge answer": ("<reasoning>\nx\n</reasoning>\n<answer>\n", "7", "\n</answer>"),
    "one huge comma-grouped answer": ("<reasoning>\nx\n</reasoning>\n<answer>\n1", ",000", "\n</answer>"),
}


def corpus(size: int) -> dict[str, str]:
    """Each pattern repeated to about ``size`` characters."""
    out = {}
    for name, (prefix, piece, suffix) in PATTERNS.items():
        out[name] = prefix + piece * max(1, (size - len(prefix) - len(suffix)) // len(piece)) + suffix
    return out


def functions() -> dict[str, Callable[[str], object]]:
    """Every built-in reward but math-verify (one completion each, with gold answers that do not match) and
    every extraction rule of every task."""
    calls: dict[str, Callable[[str], object]] = {}
    columns = {"answer": ["12345"], "nums": [[3, 5, 7]], "target": [22]}
    for name, func in BUILTIN_REWARDS.items():
        if name.startswith("math_verify"):
            continue
        kwargs = {c: columns[c] for c in getattr(func, "columns", ())}
        calls[name] = lambda text, f=func, kw=kwargs: f(prompts=[None], completions=[text], **kw)
    for task in TASKS.values():
        for rule_name, rule in task.rules.items():
            if task.name == "math500":  # its rules call math-verify on what they extract (timed out there)
                calls[f"{task.name} {rule_name} (extract)"] = rule.extract
            else:
                calls[f"{task.name} {rule_name}"] = rule.extract
    calls.update({"extract_xml_answer": extract_xml_answer, "extract_final_answer": extract_final_answer,
                  "is_strict_format": is_strict_format, "countdown_answer": countdown_answer})
    return calls


def worst_case(size: int, repeat: int = 1) -> dict[str, tuple[float, str]]:
    """``{function: (seconds, input name)}``: each function's slowest input of :func:`corpus` (best of ``repeat``)."""
    inputs = corpus(size)
    worst: dict[str, tuple[float, str]] = {}
    for name, call in functions().items():
        for label, text in inputs.items():
            best = float("inf")
            for _ in range(repeat):
                start = time.perf_counter()
                call(text)
                best = min(best, time.perf_counter() - start)
            if best > worst.get(name, (-1.0, ""))[0]:
                worst[name] = (best, label)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, default=1024, help="size of each adversarial completion, in KiB")
    parser.add_argument("--repeat", type=int, default=3, help="time each call this many times, keep the best")
    args = parser.parse_args()
    worst = worst_case(args.kib * 1024, args.repeat)
    print(f"{len(PATTERNS)} adversarial completions of {args.kib} KiB each; slowest input per function:")
    for name, (seconds, label) in sorted(worst.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:45s} {seconds * 1000:9.1f} ms   ({label})")
    slowest = max(s for s, _ in worst.values())
    print(f"slowest: {slowest * 1000:.1f} ms per {args.kib} KiB completion (target: at most 50 ms per MiB)")


if __name__ == "__main__":
    main()
