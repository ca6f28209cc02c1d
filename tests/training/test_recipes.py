"""Recipes are TRL's own config files: read by TRL's parser, any GRPOConfig key reaching the trainer's config, a
misspelled key refused in one line, a `trl grpo` recipe taken as it is, and the shipped presets being such files."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re

import pytest
import yaml

from grpo_kit.cli import main
from grpo_kit.runs.spec import recipe_rewards
from grpo_kit.system.install import installed_version
from grpo_kit.tasks import get_task
from grpo_kit.training import presets
from grpo_kit.training.presets import PRESETS, RECIPES_DIR, Recipe, get_preset, recipe_yaml
from grpo_kit.training.trainer import grpo_config

GSM8K = get_task("gsm8k")

#: A recipe as `trl grpo --config` takes it (open-r1's recipes/*/config_*.yaml are of this form), with a tiny-policy
#: model so that it also builds on a CPU.
TRL_RECIPE = """\
# Model arguments
model_name_or_path: null
dtype: float32
# Data training arguments
dataset_name: openai/gsm8k
dataset_config: main
reward_funcs:
- accuracy_reward
- think_format_reward
# GRPO trainer config
use_cpu: true
bf16: false
learning_rate: 3.0e-05
lr_scheduler_type: cosine
warmup_steps: 0.1
num_generations: 8
per_device_train_batch_size: 8
max_completion_length: 64
max_steps: 5
save_steps: 5
seed: 7
"""


def test_every_shipped_preset_is_a_recipe_file_with_trls_keys():
    """Each preset is grpo_kit/recipes/NAME.yaml; its keys are TRL's (read back by the same parser unchanged)."""
    assert sorted(PRESETS) == sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
    for name, recipe in PRESETS.items():
        assert recipe.name == name
        assert get_preset(RECIPES_DIR / f"{name}.yaml") == recipe


@pytest.mark.parametrize("argv, key, value", [
    (["--top_entropy_quantile", "0.2"], "top_entropy_quantile", 0.2),
    (["--vllm_importance_sampling_mode", "token_truncate"], "vllm_importance_sampling_mode", "token_truncate"),
    (["--off_policy_mask_threshold", "0.5"], "off_policy_mask_threshold", 0.5),
])
def test_any_grpo_config_key_reaches_trls_config_with_no_kit_change(tmp_path, argv, key, value):
    """Keys the kit never names, given in TRL's command-line form, are typed by TRL's parser and reach GRPOConfig."""
    recipe = get_preset("cpu-tiny", argv=argv)
    assert getattr(recipe, key) == value
    assert getattr(grpo_config(recipe, str(tmp_path), GSM8K.reward_set()), key) == value


def test_every_recipe_key_is_an_attribute_that_readers_and_tools_see():
    """`Recipe.__getattr__` answered `recipe.KEY`, so no reader, IDE, type checker or `dir()` saw a recipe's keys:
    each field of TRL's dataclasses and the kit's is an attribute, the recipe's value or the field's default as TRL's
    parser types it, and the type checkers' base holds the same dataclasses the parser reads."""
    recipe = get_preset("cpu-tiny", argv=["--top_entropy_quantile", "0.2"])
    assert "__getattr__" not in vars(Recipe)
    for kind in presets._recipe_dataclasses():
        for key in (f.name for f in dataclasses.fields(kind) if f.name != "name"):
            value = recipe.settings.get(key, presets._defaults()[key])
            assert key in dir(recipe) and getattr(recipe, key) == value, key
    assert (recipe.top_entropy_quantile, recipe.learning_rate, recipe.adam_epsilon) == (0.2, 3e-5, 1e-8)
    tree = ast.parse(inspect.getsource(presets))
    typed = next(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == "_RecipeKeys")
    assert [base.id for base in typed.bases] == [kind.__name__ for kind in presets._recipe_dataclasses()]


def test_a_recipe_is_read_only_and_has_no_key_it_does_not_hold():
    recipe = get_preset("cpu-tiny")
    with pytest.raises(dataclasses.FrozenInstanceError, match="get_preset"):
        recipe.learning_rate = 1.0
    with pytest.raises(AttributeError):
        _ = recipe.learning_rat
    assert get_preset(recipe, learning_rate=1e-4).learning_rate == 1e-4 and recipe.learning_rate == 3e-5
    recorded = Recipe("old", {"learning_rate": 1e-5, "a_key_of_an_older_kit": 1})  # a run folder's record
    assert recorded.learning_rate == 1e-5 and not hasattr(recorded, "a_key_of_an_older_kit")


def test_a_recipe_file_sets_any_grpo_config_key(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load((RECIPES_DIR / "cpu-tiny.yaml").read_text()),
                                    "top_entropy_quantile": 0.5, "vllm_importance_sampling_mode": "token_mask"}))
    config = grpo_config(get_preset(path), str(tmp_path), GSM8K.reward_set())
    assert (config.top_entropy_quantile, config.vllm_importance_sampling_mode) == (0.5, "token_mask")


@pytest.mark.parametrize("text, message", [
    ("learning_rat: 1.0e-5\n", "unknown recipe key 'learning_rat' (did you mean learning_rate?)"),
    ("num_generation: 4\n", "unknown recipe key 'num_generation' (did you mean num_generations?)"),
    ("extra: {top_p: 0.9}\n", "recipe key 'extra' is gone: write its GRPOConfig keys themselves"),
    ("warmup_ratio: 2\n", "recipe key 'warmup_ratio' is gone: removed in transformers 5: write warmup_steps"),
    ("torch_dtype: bfloat16\ndtype: float16\n", "recipe keys 'torch_dtype' and 'dtype' say the same: keep 'dtype'"),
    ("learning_rate: 1.0e-5\nlearning_rate: 0.5\n", "bad.yaml:2: the key 'learning_rate' is given twice"),
    ("learning_rate: [1\n", "bad.yaml:2 is not YAML (did not find expected ',' or ']')"),  # libyaml's words
    ("- a list\n", "is not a YAML mapping"),
    ("max_steps: ten\n", "recipe key max_steps: invalid int value: 'ten'"),
])
def test_a_bad_recipe_file_is_refused_in_one_line(tmp_path, capsys, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ValueError) as refused:
        get_preset(tmp_path / "bad.yaml")
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert main(["plan", "--config", str(tmp_path / "bad.yaml")]) == 2
    assert message in capsys.readouterr().err


def test_a_trl_grpo_recipe_s_data_and_reward_keys_are_read_as_trl_grpo_reads_them(tmp_path):
    """dataset_name and its splits are the task's data, reward_funcs name TRL's rewards; the rest builds TRL's
    config as written."""
    (tmp_path / "trl.yaml").write_text(TRL_RECIPE)
    recipe = get_preset(tmp_path / "trl.yaml")
    assert recipe.data_task() == {"name": "gsm8k", "description": "openai/gsm8k, as recipe trl names it",
                                  "hub": {"path": "openai/gsm8k", "name": "main", "train_split": "train",
                                          "test_split": "test"},
                                  "question": "prompt", "answer": "solution", "answer_type": "math",
                                  "solution": "solution"}
    rewards = recipe_rewards(recipe, GSM8K, trusted=False)
    assert rewards.names == ["accuracy_reward", "think_format_reward"] and rewards.weights == [1.0, 1.0]
    assert "data: openai/gsm8k (main), splits train/test" in recipe.taken()[0]
    config = grpo_config(recipe, str(tmp_path / "out"), GSM8K.reward_set())
    assert (config.seed, config.max_steps, config.warmup_steps, config.lr_scheduler_type) == (7, 5, 0.1, "cosine")
    assert recipe.algorithm == "trl_default" and recipe.model is None


@pytest.mark.parametrize("names, weights, trusted, message", [
    (["accuracy", "format", "tag_count"], [2.0, 1.0, 0.5], False, None),
    (["xmlcount_reward_func"], [1.0, 2.0], False, "2 weights for 1 rewards"),
    (["nosuch"], None, False, "unknown reward 'nosuch': choose the kit's"),
    (["os.system"], None, False, "'os.system' is Python the recipe file would import and run"),
    (["tests.launch_rewards.digit_share"], None, True, None),
])
def test_reward_funcs_name_rewards_and_python_only_when_trusted(names, weights, trusted, message):
    recipe = get_preset("cpu-tiny", reward_funcs=names, **({"reward_weights": weights} if weights else {}))
    if message is None:
        assert len(recipe_rewards(recipe, GSM8K, trusted).names) == len(names)
    else:
        with pytest.raises(ValueError, match=re.escape(message)):
            recipe_rewards(recipe, GSM8K, trusted)


def test_the_cli_takes_a_recipe_file_and_trl_form_overrides(tmp_path, capsys):
    (tmp_path / "trl.yaml").write_text(TRL_RECIPE)
    assert main(["plan", "--config", str(tmp_path / "trl.yaml"), "--json", "--top_entropy_quantile", "0.3"]) == 0
    out = capsys.readouterr().out
    assert '"top_entropy_quantile": 0.3' in out and '"seed": 7' in out
    assert main(["plan", "--config", str(tmp_path / "trl.yaml"), "--preset", "cpu-tiny"]) == 2
    assert "argument --preset: not allowed with argument --config" in capsys.readouterr().err  # one names the recipe
    assert main(["presets", "--learning_rate", "1"]) == 2  # only the commands that take a recipe take its keys


def test_the_resolved_recipe_reads_back_as_the_same_recipe(tmp_path):
    """recipe.yaml (what a run folder keeps, and what a resume reads) holds the overrides and reads back equal."""
    recipe = get_preset("a100", argv=["--learning_rate", "1e-5"], lora_r=16, algorithm="dapo")
    (tmp_path / "recipe.yaml").write_text(recipe_yaml(recipe))
    again = get_preset(tmp_path / "recipe.yaml")
    assert again == recipe and again.name == "a100"
    assert (again.learning_rate, again.lora_rank, again.algorithm, again.epsilon_high) == (1e-5, 16, "dapo", 0.28)


def test_a_recipes_env_block_is_said_in_the_runs_first_lines(tmp_path, monkeypatch, capsys, kit_log_on_stderr):
    """Case 2: a recipe's env: block set HF_HUB_OFFLINE and other variables without a word."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GRPO_KIT_TEST_VARIABLE", raising=False)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("env:\n  HF_HUB_OFFLINE: '0'\n  GRPO_KIT_TEST_VARIABLE: 5\nmax_steps: 3\n", encoding="utf-8")
    main(["plan", "--config", str(recipe)])  # (2: this recipe wants a GPU)
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (f"[grpo_kit] WARNING: recipe {recipe} sets environment variables for this process (its env: "
                     "block): HF_HUB_OFFLINE=0 (was 1), GRPO_KIT_TEST_VARIABLE=5")
    import os

    assert os.environ["GRPO_KIT_TEST_VARIABLE"] == "5"
    recipe.write_text("env: [HF_HUB_OFFLINE]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="env must map environment variable names to values"):
        get_preset(recipe)


#: open-r1's recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml as published (huggingface/open-r1, its newest
#: version, commit ca8664d of 2025-04-02), key for key.
OPEN_R1_DEMO = """\
# Model arguments
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
model_revision: main
torch_dtype: bfloat16
attn_implementation: flash_attention_2

# Data training arguments
dataset_name: open-r1/OpenR1-Math-220k
dataset_prompt_column: problem
system_prompt: "You are a helpful AI Assistant that provides well-reasoned and detailed responses. You first think \\
about the reasoning process as an internal monologue and then provide the user with the answer. Respond in the \\
following format: <think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>"

# GRPO trainer config
bf16: true
use_vllm: true
do_eval: false
gradient_accumulation_steps: 4
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
hub_model_id: Qwen2.5-1.5B-Open-R1-GRPO
hub_strategy: every_save
learning_rate: 2.0e-05
log_completions: true
log_level: info
logging_first_step: true
logging_steps: 1
logging_strategy: steps
lr_scheduler_type: cosine
max_prompt_length: 512
max_completion_length: 1024
max_steps: -1
num_generations: 16
num_train_epochs: 1
output_dir: data/Qwen2.5-1.5B-Open-R1-GRPO
overwrite_output_dir: true
per_device_eval_batch_size: 16
per_device_train_batch_size: 16
push_to_hub: true
report_to:
- wandb
reward_funcs:
- accuracy
- format
- tag_count
reward_weights:
- 1.0
- 1.0
- 1.0
save_strategy: "epoch"
save_total_limit: 1
seed: 42
warmup_ratio: 0.1
"""
#: The same file's keys of 2025-02 (commit 78c197d): open-r1's dataset_configs and TRL's vllm_device, both gone since.
OPEN_R1_DEMO_2025_02 = OPEN_R1_DEMO.replace("dataset_prompt_column: problem", "dataset_configs:\n- default").replace(
    "use_vllm: true", "use_vllm: true\nvllm_device: auto")
#: What each key the kit refuses in the published file asks for, as its one message says it.
OPEN_R1_REFUSED = {
    "max_prompt_length": "recipe key 'max_prompt_length' is gone: removed from TRL's GRPOConfig in 0.28: set "
                         "max_prompt_tokens (the kit drops longer prompts from the data set rather than cutting them)",
    "overwrite_output_dir": "recipe key 'overwrite_output_dir' is gone: removed in transformers 5: drop it (a run "
                            "folder is never overwritten; --resume continues one)",
    "per_device_eval_batch_size": "per_device_eval_batch_size 16 with eval_strategy no: the kit measures held-out "
                                  "accuracy only with eval_strategy steps (every eval_steps N steps): add those, or "
                                  "drop it",
    "save_strategy": "save_strategy 'epoch': the kit saves a checkpoint every save_steps steps, so a killed run loses "
                     "at most that many (--resume): write save_strategy steps and save_steps N",
}


@pytest.mark.parametrize("published, renamed, refused", [
    (OPEN_R1_DEMO, "torch_dtype as dtype, warmup_ratio as warmup_steps", OPEN_R1_REFUSED),
    (OPEN_R1_DEMO_2025_02, "torch_dtype as dtype, dataset_configs as dataset_config, warmup_ratio as warmup_steps",
     {"vllm_device": "recipe key 'vllm_device' is gone: removed from TRL's GRPOConfig: its vLLM runs on the training "
                     "GPUs (vllm_mode colocate) or as a server on GPUs of its own (vllm_mode server, trl vllm-serve): "
                     "drop it", **OPEN_R1_REFUSED}),
])
def test_open_r1_s_published_recipe_is_put_right_in_one_pass(tmp_path, capsys, kit_log_on_stderr, published, renamed,
                                                             refused):
    """Each run named one old key and stopped (about 60 s each): now the renamed ones are read with one notice, and
    every other key to change is named in one line with what to write instead, before anything loads."""
    (tmp_path / "demo.yaml").write_text(published)
    assert main(["plan", "--config", str(tmp_path / "demo.yaml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"[grpo_kit] WARNING: recipe {tmp_path / 'demo.yaml'}: read {renamed} (the names TRL " \
                     f"{installed_version('trl')} reads)"
    assert len(err) == 2 and err[1].startswith(f"error: {tmp_path / 'demo.yaml'}: "), err
    assert "; ".join(refused.values()) in err[1]


def _put_right(published: str) -> str:
    """The published recipe changed as its one message says (what the kit reads instead), renamed keys kept."""
    recipe = yaml.safe_load(published)
    for key in ("overwrite_output_dir", "per_device_eval_batch_size"):
        del recipe[key]
    recipe["max_prompt_tokens"] = recipe.pop("max_prompt_length")
    recipe["save_strategy"] = "steps"
    return yaml.safe_dump(recipe, sort_keys=False)


def test_open_r1_s_demo_recipe_plans_and_trains_once_put_right(tmp_path, tiny_policy_files, capsys, monkeypatch):
    """The published recipe with the changes its one message asks for: `plan` says what the kit takes from the
    recipe's script keys and what this machine lacks (a GPU, flash-attn, a Hub token); `train` at toy shapes on the
    CPU (a tiny model, a local copy of the data set's columns, small batches,
    no vLLM, no upload) trains on the recipe's data, prompt column, system prompt and rewards, and says so first."""
    import json

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    (tmp_path / "demo.yaml").write_text(_put_right(OPEN_R1_DEMO))
    assert main(["plan", "--config", "demo.yaml"]) == 2
    out = capsys.readouterr().out
    for line in ("from the recipe: data: open-r1/OpenR1-Math-220k, splits train/test, question column problem, "
                 "answers in solution checked as math, the recipe's system_prompt",
                 "from the recipe: rewards: reward_funcs accuracy, format, tag_count weighted 1, 1, 1",
                 "from the recipe: run folder: output_dir data/Qwen2.5-1.5B-Open-R1-GRPO",
                 "from the recipe: max_steps -1: num_train_epochs 1 over the train split",
                 "FATAL: attn_implementation 'flash_attention_2' runs on CUDA GPUs only: on a CPU set "
                 "--attn_implementation sdpa",
                 "FATAL: push_to_hub uploads every checkpoint to the Hub, and there is no Hugging Face token here"):
        assert line in out, out
    data = tmp_path / "math"
    data.mkdir()
    for split, n in (("train", 16), ("test", 4)):
        rows = [{"problem": f"What is {i} + {i}?", "solution": f"{i} + {i} = \\\\boxed{{{2 * i}}}"} for i in range(n)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    toy = ["--model_name_or_path", str(tiny_policy_files), "--dataset_name", str(data), "--use_vllm", "false",
           "--use_cpu", "true", "--push_to_hub", "false", "--per_device_train_batch_size", "4", "--num_generations",
           "2", "--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--gradient_checkpointing",
           "false", "--log_completions", "false", "--max_steps", "1", "--attn_implementation", "sdpa",
           "--dtype", "float32"]
    assert main(["train", "--config", "demo.yaml", *toy]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[grpo_kit] train: ")]
    assert "[grpo_kit] train: rewards: reward_funcs accuracy, format, tag_count weighted 1, 1, 1" in said
    assert any(line.startswith(f"[grpo_kit] train: data: {data}, splits train/test, question column problem")
               for line in said), said
    run = tmp_path / "data" / "Qwen2.5-1.5B-Open-R1-GRPO"  # output_dir is the run folder
    settings = json.loads((run / "train_settings.json").read_text())
    assert settings["identity"]["rewards"] == {"accuracy_reward": 1.0, "r1_format_reward_func": 1.0,
                                               "r1_tag_count_reward_func": 1.0}
    task = get_preset(run / "recipe.yaml").data_task()
    assert task["system_prompt"].startswith("You are a helpful AI Assistant") and task["question"] == "problem"


def test_old_names_are_read_as_todays_with_one_notice(capsys, kit_log_on_stderr):
    """--lora_rank 8 (what --set lora_rank=8 advised) was refused; the kit's and TRL's old names read as today's."""
    today = get_preset("cpu-tiny", argv=["--use_peft", "true", "--lora_r", "8", "--dtype", "bfloat16"])
    assert get_preset("cpu-tiny", argv=["--lora_rank", "8", "--torch_dtype", "bfloat16"]) == today
    assert capsys.readouterr().err == ("[grpo_kit] WARNING: the command line: read --lora_rank as --use_peft and "
                                       f"--lora_r, --torch_dtype as --dtype (the names TRL {installed_version('trl')} "
                                       "reads)\n")
    assert get_preset("cpu-tiny", lora_rank=None, model="Qwen/Qwen2.5-0.5B").settings["use_peft"] is False
    assert get_preset("cpu-tiny", warmup_ratio=0.1).warmup_steps == 0.1


def test_one_winner_rule_the_command_line_over_the_file_and_the_last_of_a_key_given_twice(tmp_path, capsys):
    """`--max-steps 5 --max_steps 7` trains 7 steps, and a recipe key on the command line wins over the file's;
    dashes are read as TRL's parser reads them (`--learning-rate` was a KeyError)."""
    (tmp_path / "trl.yaml").write_text(TRL_RECIPE)
    for argv, steps in ((["--max-steps", "5", "--max_steps", "7"], 7), (["--max_steps", "7", "--max-steps", "5"], 5),
                        ([], 5)):
        assert get_preset(tmp_path / "trl.yaml", argv=argv).max_steps == steps
    assert get_preset("cpu-tiny", argv=["--max_steps", "9"], max_steps=4).max_steps == 9  # over a call's overrides
    for command in ("plan", "train"):
        code = main([command, "--config", str(tmp_path / "trl.yaml"), "--learning-rate", "1e-5", "--json",
                     "--learning_rat", "2"] if command == "plan" else
                    [command, "--config", str(tmp_path / "trl.yaml"), "--learning-rate", "0"])
        assert code == 2 and "KeyError" not in capsys.readouterr().err
    assert main(["plan", "--config", str(tmp_path / "trl.yaml"), "--json", "--learning-rate", "1e-5"]) == 0
    assert '"learning_rate": 1e-05' in capsys.readouterr().out


def test_a_recipe_that_is_not_a_yaml_file_is_one_line_naming_the_file_and_line(tmp_path, capsys):
    (tmp_path / "latin1.yaml").write_bytes("description: caf\u00e9\n".encode("latin-1"))
    (tmp_path / "broken.yaml").write_text("learning_rate: 1.0e-5\nlr_scheduler_type: [cosine\n")
    (tmp_path / "folder.yaml").mkdir()
    for path, message in ((tmp_path / "latin1.yaml", "latin1.yaml is not UTF-8 text (invalid continuation byte at "
                                                     "byte 16): save it as UTF-8"),
                          (tmp_path / "broken.yaml", "broken.yaml:3 is not YAML (did not find expected ',' or "
                                                     "']'): fix a recipe at that line"),  # libyaml's words
                          (tmp_path / "folder.yaml", "folder.yaml is a folder: give the path of a recipe"),
                          (tmp_path, f"{tmp_path} is a folder: give the path of a recipe (a YAML file)")):
        assert main(["plan", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_merge_keys_read_the_same_in_recipes_and_task_files(tmp_path):
    """YAML's merge key (`<<: *anchor`) merges, a mapping's own keys over the merged ones, in both kinds of file;
    a key given twice is refused in both."""
    from grpo_kit.system.files import read_yaml
    from grpo_kit.tasks.task_file import _read_yaml

    (tmp_path / "recipe.yaml").write_text("gradient_checkpointing_kwargs: &kw {use_reentrant: false}\n"
                                          "model_init_kwargs:\n  <<: *kw\n  use_reentrant: true\n  low: 1\n")
    assert get_preset(tmp_path / "recipe.yaml").model_init_kwargs == {"use_reentrant": True, "low": 1}
    task = ("question: q\nanswer: a\nanswer_type: text\ntest: test.jsonl\n"
            "rewards: &r {text_correctness_reward_func: 2.0}\n"
            "compare_rewards: {mine: {<<: *r, strict_format_reward_func: 0.5}}\n")
    (tmp_path / "task.yaml").write_text(task)
    assert _read_yaml(tmp_path / "task.yaml")["compare_rewards"]["mine"] == {"text_correctness_reward_func": 2.0,
                                                                            "strict_format_reward_func": 0.5}
    (tmp_path / "twice.yaml").write_text("a: {<<: {b: 1}, c: 2, c: 3}\n")
    with pytest.raises(ValueError, match="twice.yaml:1: the key 'c' is given twice"):
        read_yaml(tmp_path / "twice.yaml", "a recipe")


@pytest.mark.parametrize("argv, message", [
    (["--fp16", "true"], "fp16 = True on a CPU: accelerate runs float16 mixed precision only on accelerators"),
    (["--optim", "paged_adamw_8bit"], "optim = 'paged_adamw_8bit' is a bitsandbytes optimizer, which runs on CUDA"),
    (["--deepspeed", "ds.json"], "deepspeed = 'ds.json': DeepSpeed is not installed here"),
    (["--push_to_hub", "true"], "push_to_hub uploads every checkpoint to the Hub, and HF_HUB_OFFLINE is set"),
    (["--max_steps", "99999999999999999999999"], "max_steps = 99999999999999999999999 cannot work"),
    (["--num_generations", "100000", "--per_device_train_batch_size", "100000"],
     "one micro-batch does not fit this machine's memory"),
    (["--top_p", "2"], "top_p = 2.0 cannot work: set it to a number in (0, 1]"),
    (["--generation_batch_size", "5"], "TRL's GRPOConfig refuses this recipe's generation_batch_size 5: "
                                       "generation_batch_size (5) must be"),
    (["--eval_strategy", "epoch"], "eval_strategy = 'epoch': the kit measures held-out accuracy every eval_steps"),
    (["--eval_steps", "3"], "eval_steps = 3 with eval_strategy no measures nothing"),
])
def test_what_this_machine_lacks_is_said_by_plan_and_refused_by_train_before_loading(argv, message, tmp_path, capsys,
                                                                                   monkeypatch):
    """Each was a traceback (or a silent run) only after the model loaded: ImportError, PackageNotFoundError, a
    34-frame ConnectError, "about 43416976345568395264 h"."""
    import importlib.util

    from grpo_kit.policy.source import PolicySource

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(PolicySource, "load", lambda *a, **k: pytest.fail("a model loaded"))
    assert main(["plan", "--preset", "cpu-tiny", *argv]) == 2
    assert message in capsys.readouterr().out
    run = tmp_path / "run"
    assert main(["train", "--preset", "cpu-tiny", "--run-dir", str(run), "--cache-dir", str(tmp_path / "c"),
                 *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (run / "checkpoints").exists()


def test_a_runs_old_keys_in_the_file_and_on_the_command_line_are_said_once_and_refused_in_one_line(tmp_path, capsys,
                                                                                                  kit_log_on_stderr):
    """train read the command line's keys before the recipe's: a key gone from both was refused one place at a time,
    and a renamed one said twice."""
    (tmp_path / "old.yaml").write_text("max_prompt_length: 256\nmax_steps: 2\n")
    assert main(["train", "--config", str(tmp_path / "old.yaml"), "--run-dir", str(tmp_path / "run"), "--torch_dtype",
                 "float32", "--overwrite_output_dir", "true"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("[grpo_kit] WARNING: the command line: read --torch_dtype as --dtype") and len(err) == 2
    assert "recipe key 'max_prompt_length' is gone" in err[1] and "recipe key --overwrite_output_dir is gone" in err[1]


@pytest.mark.parametrize("source, argv, overrides, asks", [
    ("a100", [], {}, True), ("cpu-tiny", [], {}, False), ("cpu-tiny", ["--use_unsloth", "true"], {}, True),
    ("cpu-tiny", ["--use-unsloth=true"], {}, True), ("cpu-tiny", ["--use_unsloth", "--max_steps", "2"], {}, True),
    ("a100", ["--use_unsloth", "false"], {}, False), ("a100", ["--no_use_unsloth"], {}, False),
    ("a100", [], {"use_unsloth": False}, False), ("cpu-tiny", ["--use_unsloth", "1"], {"use_unsloth": False}, True),
    ("no-such-recipe", [], {}, False),
])
def test_use_unsloth_is_read_as_written_before_trls_parser(source, argv, overrides, asks, monkeypatch):
    """Which recipes import Unsloth before TRL's parser on a GPU (the stack suite checks the order of imports in a
    fresh process): the file's key, then the call's, then the command line's last, in TRL's spellings."""
    from grpo_kit.training import presets

    asked = []
    monkeypatch.setattr(presets, "_unsloth_first_if_asked", lambda written, *a: asked.append(
        presets._asks_unsloth(written, *a)))
    presets.unsloth_first(source, argv, overrides)
    assert asked == [asks]
