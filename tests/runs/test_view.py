"""``python -m grpo_kit view``: one self-contained page of what runs did, opened in a real browser (headless Chromium
from Debian's packages, driven by Selenium): the flip filter shows exactly ``flipped()``'s questions, the search finds
a completion, a ``<script>`` completion shows as text and never runs, and the console stays clean.

The run folders are written from scored completions (tests/viewer_run.py): what is tested is the page, which the
notebooks' and demo's real runs then fill.
"""

from __future__ import annotations

import os
import re

import pytest

from grpo_kit.cli import main
from grpo_kit.evaluation.compare import flipped
from grpo_kit.evaluation.scoring import EvalResult
from grpo_kit.evaluation.viewer import MARK
from grpo_kit.runs.view import view_data, write_view
from grpo_kit.tasks import get_task
from tests import browser
from tests.viewer_run import NEEDLE, SCRIPT, TRAINED, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    a, b = write_run(root / "a"), write_run(root / "b", seed=7, right=0.4)
    # the folders record a reward of the tests' own (tests.viewer_run:answer_length): its module is trusted here
    return a, b, write_view([a], trust_remote_code=True), write_view([a, b], trust_remote_code=True,
                                                                     out=root / "both.html")


def _result(path):
    return EvalResult.from_jsonl(path, task=get_task("gsm8k"))


def test_the_page_is_one_file_that_needs_no_network(runs):
    a, _, page, _ = runs
    text = page.read_text(encoding="utf-8")
    assert page == a / "view.html" and text.startswith(MARK)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched from anywhere
    assert "<script>document.title" not in text  # completions travel compressed, never as markup


def test_the_data_pairs_questions_and_keeps_the_groups(runs):
    a, b, _, _ = runs
    data = view_data([a, b], trust_remote_code=True)
    assert len(data["questions"]) == 40 and all(len(q["after"]) == 2 for q in data["questions"])
    assert [r["name"] for r in data["runs"]] == ["a", "b"] and data["compare"]["pairs"]
    groups = data["runs"][0]["groups"]
    assert groups["steps"] == [1, 2, 3, 4] and len(groups["groups"]) == 12
    assert groups["rewards"] == ["strict_format_reward_func", "correctness_reward_func"]
    zero = [g for g in groups["groups"] if g["std"] == 0]
    assert {g["group"] for g in zero} == {0} and all(set(g["advantage"]) == {0} for g in zero)
    assert data["runs"][0]["reward_check"]["rows"][-1]["reward"] == "reward set (weighted total)"


def test_the_page_shows_every_reward_the_run_trained_with_and_checks_that_set(runs):
    """Issue 46: a reward of the user's was missing from the before/after table though report.md had it, and the
    Reward check tab showed the task's default set, not the one trained."""
    a, _, _, _ = runs
    data = view_data([a], trust_remote_code=True)
    metrics = {m["key"]: m for m in data["metrics"]}
    assert "answer_length" in metrics and "answer_length" in [r["metric"] for r in data["runs"][0]["table"]]
    assert all(q["before"]["values"]["answer_length"] is not None for q in data["questions"])
    check = data["runs"][0]["reward_check"]
    assert check["weights"] == TRAINED["rewards"] and check["which"] == "the reward set this run trained with"
    assert [r["reward"] for r in check["rows"]] == [*TRAINED["rewards"], "reward set (weighted total)"]
    # right/wrong only for what judges the answer: the rules and the correctness rewards, never the format
    assert {k for k, m in metrics.items() if m["correctness"]} == {"strict_correct", "flexible_correct",
                                                                    "correctness_reward_func",
                                                                    "soft_correctness_reward_func"}
    assert metrics["strict_format_reward_func"]["binary"] and not metrics["strict_format_reward_func"]["correctness"]


def test_extracted_is_the_answer_each_rule_read_not_the_whole_completion(runs):
    """The page's "extracted:" showed a whole completion that had no answer tags (the reward functions' rule gives
    the text back); it shows what each accuracy rule read, none where it read nothing."""
    a, _, _, _ = runs
    data = view_data([a], trust_remote_code=True)
    untagged = data["questions"][0]["before"]  # the <script> completion: no answer tags, no number
    assert untagged["completion"] == SCRIPT and untagged["extracted"] == {"strict": None, "flexible": None}
    tagged = data["questions"][3]["after"][0]
    assert NEEDLE in tagged["completion"] and tagged["extracted"]["strict"] == data["questions"][3]["answer"]


def test_view_refuses_a_file_it_did_not_write_and_a_missing_folder(runs, tmp_path, capsys):
    a, _, _, _ = runs
    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    assert main(["view", "--trust-task-code", str(a), "--out", str(mine)]) == 2
    assert "was not written by python -m grpo_kit view" in capsys.readouterr().err and mine.read_text() == "my notes"
    assert main(["view", "--trust-task-code", str(tmp_path / "nowhere")]) == 2
    assert "no run folder at" in capsys.readouterr().err
    out = tmp_path / "again.html"
    for _ in range(2):
        assert main(["view", "--trust-task-code", str(a), "--out", str(out)]) == 0


def test_a_notebook_shows_the_page_inline_in_one_call(runs, tmp_path):
    from grpo_kit.notebook import view_runs
    from grpo_kit.runs.folder import RunFolder

    shown = view_runs(RunFolder(runs[0]), trust_remote_code=True, out=tmp_path / "v.html")
    inline = shown._repr_html_()
    assert shown.path == tmp_path / "v.html" and inline.startswith("<iframe srcdoc=")
    assert "<script" not in inline.split("</iframe>")[0].removeprefix("<iframe")  # the page is an escaped attribute
    assert view_runs([runs[0], runs[1]], trust_remote_code=True).path == runs[0].parent / "comparison" / "view.html"


# --- in the browser ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver():
    why = browser.missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    d = browser.chromium()
    yield d
    d.quit()


def _shown(driver) -> list[int]:
    shown = driver.find_element("id", "list").get_attribute("data-shown")
    return [int(i) for i in shown.split(",")] if shown else []


def _choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", select_id)).select_by_value(value)


def _groups_drawn(driver) -> None:
    """Wait until the training groups (inflated after the page is drawn) are shown."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.find_elements("css selector", "#groups .controls"))


def _errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


@pytest.mark.parametrize("metric", ["correctness_reward_func", "strict_correct"])
def test_the_flip_filter_shows_exactly_the_flipped_questions_right_to_wrong_first(runs, driver, metric):
    a, b, _, both = runs
    browser.open_page(driver, both)
    driver.find_element("id", "tab-questions").click()
    for run, folder in ((0, a), (1, b)):
        _choose(driver, "run", str(run))
        _choose(driver, "metric", metric)
        _choose(driver, "flip", "flipped")
        expected = flipped(_result(a / "baseline.jsonl"), _result(folder / "trained.jsonl"), metric)
        shown = _shown(driver)
        assert sorted(shown) == sorted(expected["index"]) and len(shown) > 0
        lost = list(expected[expected["change"] == "right -> wrong"]["index"])
        assert shown[:len(lost)] == lost  # right -> wrong first
        _choose(driver, "flip", "right_to_wrong")
        assert _shown(driver) == lost
    assert not _errors(driver)


def test_the_search_finds_a_completion(runs, driver):
    _, _, page, _ = runs
    browser.open_page(driver, page)
    driver.find_element("id", "tab-questions").click()
    box = driver.find_element("id", "search")
    box.send_keys(NEEDLE.upper())  # case does not matter
    index = _result(runs[0] / "baseline.jsonl").records[3]["index"]
    assert _shown(driver) == [index]
    cards = driver.find_elements("css selector", "#list .card")
    assert len(cards) == 1 and NEEDLE in cards[0].text
    box.clear()
    box.send_keys("no completion says this")
    assert _shown(driver) == [] and "0 questions" in driver.find_element("id", "count").text


def test_a_script_completion_shows_as_text_and_never_runs(runs, driver):
    _, _, page, _ = runs
    browser.open_page(driver, page)
    driver.find_element("id", "tab-questions").click()
    texts = [e.text for e in driver.find_elements("css selector", "#list pre.completion")]
    assert SCRIPT in texts  # the baseline's first completion, as written
    driver.find_element("id", "tab-training").click()  # step 1's groups hold one too
    _groups_drawn(driver)
    assert any(SCRIPT in e.text for e in driver.find_elements("css selector", "#groups pre"))
    assert driver.execute_script("return window.__ran") is None and driver.title != "ran"
    assert not driver.find_elements("css selector", "#main img")
    assert not _errors(driver)


def test_badges_say_right_or_wrong_only_for_correctness_and_wide_tables_fit(runs, driver):
    _, _, page, _ = runs
    driver.set_window_size(800, 900)
    try:
        browser.open_page(driver, page)
        driver.find_element("id", "tab-questions").click()
        badges = [e.text for e in driver.find_elements("css selector", "#list .card .sides .badge")]
        assert badges and all(b.split(":")[0] in ("Strict accuracy", "Flexible accuracy", "Hard correctness",
                                                  "Soft correctness") for b in badges), set(badges)
        assert "Strict format 0.50 of 0.50" in driver.find_element("id", "list").text
        driver.find_element("id", "tab-training").click()
        _groups_drawn(driver)
        assert "advantage" in driver.find_element("id", "groups").text
        assert driver.execute_script("return document.documentElement.scrollWidth <= "
                                     "document.documentElement.clientWidth")  # no sideways scrolling to reach it
    finally:
        driver.set_window_size(1400, 1000)
    assert not _errors(driver)


def test_every_tab_draws_without_a_console_error(runs, driver, tmp_path):
    for page in runs[2:]:
        browser.open_page(driver, page)
        for tab in ("questions", "reward-check", "summary", "training"):
            driver.find_element("id", f"tab-{tab}").click()
        _groups_drawn(driver)
        driver.find_element("id", "zero-only").click()
        assert "zero reward variance" in driver.find_element("id", "groups").text
        assert driver.save_screenshot(str(tmp_path / "page.png"))
        assert not _errors(driver), _errors(driver)


def test_the_notebooks_inline_frame_draws_the_page(runs, driver, tmp_path):
    from grpo_kit.notebook import view_runs

    cell = tmp_path / "cell.html"  # a notebook's output area holding what view_runs shows
    shown = view_runs(runs[0], out=tmp_path / "v.html", trust_remote_code=True)
    cell.write_text(f"<html><body>{shown._repr_html_()}</body></html>")
    driver.get(cell.as_uri())
    driver.switch_to.frame(driver.find_element("tag name", "iframe"))
    try:
        assert browser.wait_for(driver, "viewGroupsMs") > 0
        assert "Strict accuracy" in driver.find_element("id", "summary").text
    finally:
        driver.switch_to.default_content()
    assert not _errors(driver)


def test_out_inside_a_run_folders_own_folders_is_refused(tmp_path, capsys):
    """Case 4: view --out RUN/model/view.html wrote into model/, and eval and export then refused the run."""
    run = write_run(tmp_path / "run", n=8, steps=1, samples=2)
    for inside in ("model", "groups"):
        out = run / inside / "view.html"
        assert main(["view", "--trust-task-code", str(run), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out {out} lies inside the run folder {run.resolve()}'s own {inside}/") \
            and err.count("\n") == 1
        assert not out.exists()
    from grpo_kit.runs.folder import RunFolder

    assert RunFolder(run).check_model() is not None  # model/ as training wrote it
    assert main(["view", "--trust-task-code", str(run), "--out", str(run / "view.html")]) == 0
    assert main(["view", "--trust-task-code", str(run), "--out", str(tmp_path / "elsewhere.html")]) == 0


def test_a_torn_groups_file_leaves_that_step_out_and_names_it(tmp_path):
    """Case 15 of issue 44: one torn groups/step-N.parquet made view refuse the whole page."""
    run = write_run(tmp_path / "run", n=8, steps=3, samples=2)
    torn = run / "groups" / "step-000002.parquet"
    torn.write_bytes(torn.read_bytes()[:100])
    data = view_data([run], trust_remote_code=True)
    groups = data["runs"][0]["groups"]
    assert groups["steps"] == [1, 3] and len(groups["damaged"]) == 1
    assert groups["damaged"][0].startswith(f"{torn} is damaged (") and "delete it" in groups["damaged"][0]
    assert write_view([run], trust_remote_code=True, out=tmp_path / "page.html").is_file()


def test_from_inside_a_run_folder_the_comparison_goes_beside_it_and_bad_names_are_refused(tmp_path, monkeypatch,
                                                                                           capsys):
    """Case 20 of issue 44: `compare . ../cap2` inside a run folder blamed an --out never given; view ignored
    --names that compare refused."""
    a, b = write_run(tmp_path / "cap1", n=8, steps=1, samples=2), write_run(tmp_path / "cap2", n=8, steps=1,
                                                                           samples=2, seed=7)
    monkeypatch.chdir(a)
    assert main(["compare", "--trust-task-code", ".", "../cap2"]) == 0
    assert (tmp_path / "comparison" / "runs_comparison.md").is_file() and not (a / "comparison").exists()
    assert "cap1" in (tmp_path / "comparison" / "runs_comparison.md").read_text()  # ".": named as its folder
    assert main(["view", "--trust-task-code", ".", "../cap2"]) == 0
    assert (tmp_path / "comparison" / "view.html").is_file()
    capsys.readouterr()
    for command in ("view", "compare"):
        assert main([command, "--trust-task-code", ".", "../cap2", "--names", "only-one"]) == 2
        assert capsys.readouterr().err == ("error: give one distinct name per run folder: 2 folders, names "
                                           "['only-one']\n"), command
    assert main(["view", "--trust-task-code", str(b), "--names", "x|y", "--out", str(tmp_path / "b.html")]) == 2
    assert "give names without '|'" in capsys.readouterr().err


def test_mcnemar_p_is_shown_as_the_report_prints_it(runs, driver):
    """A journey of issue 46: the Before/after tab showed McNemar p = 1.91e-06 as 0.0000."""
    a, _, page, _ = runs
    browser.open_page(driver, page)
    shown = driver.find_element("tag name", "body").text
    numbers = [p for p in view_data([a], trust_remote_code=True)["runs"][0]["table"]
               if isinstance(p.get("mcnemar_p"), float)]
    assert numbers and min(p["mcnemar_p"] for p in numbers) > 0, numbers  # a small p kept, not rounded to 0
    for row in numbers:
        mantissa, exponent = f"{row['mcnemar_p']:.2e}".split("e")  # JavaScript's toExponential(2): 1.05e-5
        assert (f"{mantissa}e{int(exponent)}" if row["mcnemar_p"] < 1e-3 else f"{row['mcnemar_p']:.3g}") in shown, row
    assert "0.0000" not in shown
    assert not _errors(driver)
