"""Exploring a task's data before training (notebook 01).

The blog post looked at GSM8K through an embedding projector: train and test mixed well, one
cluster about ages and family, and no sign of difficulty in the embedding; it proposed the
number of solution steps as a difficulty proxy. These helpers compute those views as tables
(pandas) and plots (matplotlib): lengths in tokens, solution steps, answer magnitudes,
train/test duplicates, and a 2-D map of the questions (TF-IDF + truncated SVD, offline).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from grpo_kit.tasks import DEFAULT_TASK, Task, get_task
from grpo_kit.tasks.numbers import parse_number

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["describe", "near_duplicates", "plot_distributions", "plot_question_map", "question_map"]


def _solutions(dataset: Any, task: Task) -> tuple[list[str], list[int], list[float]]:
    """Worked solutions, their step counts and the size of the answers of a task's rows: a row's ``solution`` column
    (its steps: the non-empty lines before a ``#### N`` line, the blog post's proxy for difficulty), else the task's
    demonstration (its steps: the lines of its reasoning; Countdown's solver), and the number in the column its
    ``answer_value`` names (:attr:`grpo_kit.tasks.Task.extras`)."""
    demonstrate, column = task.extras.get("demonstration"), task.extras.get("answer_value")
    solutions, steps, values = [], [], []
    for row in dataset:
        if row.get("solution"):
            solution = row["solution"]
            count = sum(1 for line in solution.split("####")[0].splitlines() if line.strip())
        else:  # a demonstration without reasoning (answers alone) shows no solution
            demo = demonstrate(row) if demonstrate is not None else None
            solution, count = (f"{demo[0]}\n{demo[1]}", len(demo[0].splitlines())) if demo and demo[0] else ("", 0)
        value = parse_number(str(row[column])) if column else None
        solutions.append(solution)
        steps.append(count)
        values.append(math.nan if value is None else float(value))
    return solutions, steps, values


def describe(dataset: Any, tokenizer: Any | None = None, split: str = "",
             task: str | Task = DEFAULT_TASK) -> pd.DataFrame:
    """One row per example: lengths, solution steps, answer magnitude.

    Args:
        dataset: rows of ``task`` (e.g. GSM8K: ``question``, ``solution``, ``answer``; Countdown:
            ``question``, ``nums``, ``target``, solved here, the target standing as the answer).
        tokenizer: lengths are counted in its tokens; ``None`` counts whitespace words.
        split: a label put in the ``split`` column.
        task: a :class:`grpo_kit.tasks.Task` or its name (where solutions, steps and answers come from).

    Returns:
        ``pandas.DataFrame`` with columns ``split``, ``question_tokens``, ``solution_tokens``,
        ``steps``, ``answer`` (float; NaN when not a number) and ``log10_answer``
        (``log10(|answer| + 1)``).
    """
    import pandas as pd

    def count(texts: list[str]) -> list[int]:
        if tokenizer is None:
            return [len(t.split()) for t in texts]
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]

    questions = list(dataset["question"])
    solutions, steps, values = _solutions(dataset, get_task(task))
    return pd.DataFrame({"split": split, "question_tokens": count(questions), "solution_tokens": count(solutions),
                         "steps": steps, "answer": values,
                         "log10_answer": [math.log10(abs(v) + 1) if not math.isnan(v) else math.nan for v in values]})


def near_duplicates(train_questions: list[str], test_questions: list[str], threshold: float = 0.9,
                    top: int = 20) -> pd.DataFrame:
    """Test questions whose closest train question is a near copy (TF-IDF cosine similarity).

    Args:
        train_questions, test_questions: the question texts.
        threshold: the cosine similarity (word 1-2-grams, TF-IDF) from which a pair counts as a
            near duplicate; 1.0 is an exact copy up to case and punctuation.
        top: how many pairs to return, most similar first.

    Returns:
        ``pandas.DataFrame`` with ``test_index``, ``train_index``, ``similarity``, ``exact``
        (identical strings), ``test_question`` and ``train_question``; ``attrs`` holds
        ``n_exact`` and ``n_near`` (pairs at or above ``threshold``) over the whole test set.
    """
    import numpy as np
    import pandas as pd
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics import pairwise_distances_argmin_min

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1).fit(train_questions + test_questions)
    # scikit-learn works through the test questions in chunks of bounded memory (its working_memory setting)
    best_index, distance = pairwise_distances_argmin_min(vectorizer.transform(test_questions),
                                                         vectorizer.transform(train_questions), metric="cosine")
    best_sim = 1.0 - distance
    train_set = set(train_questions)
    exact = np.array([q in train_set for q in test_questions])
    order = np.argsort(-best_sim)[:top]
    frame = pd.DataFrame({"test_index": order, "train_index": best_index[order], "similarity": best_sim[order].round(3),
                          "exact": exact[order], "test_question": [test_questions[i] for i in order],
                          "train_question": [train_questions[best_index[i]] for i in order]})
    frame.attrs.update(n_exact=int(exact.sum()), n_near=int((best_sim >= threshold).sum()))
    return frame


def question_map(splits: dict[str, Any], n: int | None = 3000, seed: int = 0,
                 task: str | Task = DEFAULT_TASK) -> pd.DataFrame:
    """A 2-D map of questions: TF-IDF vectors reduced by truncated SVD (offline; no embedding model).

    Args:
        splits: ``{name: dataset}`` of ``task``'s rows (e.g. train and test).
        n: how many questions to place, sampled uniformly over all splits (``None``: all).
        seed: seeds the sample and the SVD.
        task: a :class:`grpo_kit.tasks.Task` or its name (where the solution steps come from).

    Returns:
        ``pandas.DataFrame`` with ``x``, ``y``, ``split``, ``steps`` and ``question``.
    """
    import numpy as np
    import pandas as pd
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    rows = [(name, i, q) for name, ds in splits.items() for i, q in enumerate(ds["question"])]
    if n is not None and n < len(rows):
        keep = np.random.default_rng(seed).choice(len(rows), size=n, replace=False)
        rows = [rows[i] for i in sorted(keep)]
    steps = {}
    for name, ds in splits.items():  # solve only the rows placed on the map
        chosen = [i for split, i, _ in rows if split == name]
        steps.update({(name, i): k for i, k in zip(chosen, _solutions(ds.select(chosen), get_task(task))[1])})
    frame = pd.DataFrame([(name, q, steps[name, i]) for name, i, q in rows], columns=["split", "question", "steps"])
    vectors = TfidfVectorizer(stop_words="english", min_df=2).fit_transform(frame["question"])
    xy = TruncatedSVD(n_components=2, random_state=seed).fit_transform(vectors)
    frame["x"], frame["y"] = xy[:, 0], xy[:, 1]
    return frame[["x", "y", "split", "steps", "question"]]


def plot_distributions(features: pd.DataFrame) -> Any:
    """Histograms of question and solution length, solution steps and answer magnitude, per split.

    Args:
        features: :func:`describe` frames concatenated (one ``split`` label each).

    Returns:
        The ``matplotlib.figure.Figure``.
    """
    import matplotlib.pyplot as plt

    columns = [("question_tokens", "question length (tokens)"), ("solution_tokens", "solution length (tokens)"),
               ("steps", "solution steps"), ("log10_answer", "log10(|answer| + 1)")]
    fig, axes = plt.subplots(1, len(columns), figsize=(16, 3.2))
    for ax, (column, title) in zip(axes, columns):
        for split, group in features.groupby("split", sort=False):
            ax.hist(group[column].dropna(), bins=30, alpha=0.55, density=True, label=str(split))
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("density", fontsize=8)
    axes[0].legend()
    fig.tight_layout()
    return fig


def plot_question_map(frame: pd.DataFrame) -> Any:
    """Two scatter panels of :func:`question_map`: coloured by split, and by solution steps.

    Returns:
        The ``matplotlib.figure.Figure``.
    """
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for split, group in frame.groupby("split", sort=False):
        left.scatter(group["x"], group["y"], s=4, alpha=0.5, label=str(split))
    left.set_title("questions, TF-IDF + SVD: train vs test")
    left.legend(markerscale=4)
    points = right.scatter(frame["x"], frame["y"], c=frame["steps"], s=4, alpha=0.6, cmap="viridis")
    right.set_title("coloured by solution steps")
    fig.colorbar(points, ax=right, label="steps")
    fig.tight_layout()
    return fig
