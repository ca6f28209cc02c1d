"""Recipes: TRL's own config in YAML files, read with TRL's own parser.

A recipe is what ``trl grpo --config FILE`` reads (open-r1's ``recipes/*/config_*.yaml`` are such files): keys of
TRL's ``GRPOConfig`` and ``ModelConfig``, plus the few the kit adds (:class:`KitArgs`: Unsloth, its colocated vLLM,
the context length, the prompt budget, a named algorithm). It is parsed by ``trl.TrlParser`` (transformers'
``HfArgumentParser``), so every ``GRPOConfig`` field a TRL release has works with no kit change, typed as TRL types
it. The shipped recipes are the files in ``grpo_kit/recipes/``; ``--preset NAME`` names one, ``--config FILE``
takes yours. The task and its rewards belong to the run, not the recipe.

:func:`get_preset` reads a recipe and applies overrides (Python values, or ``--key value`` in TRL's command-line
form); :func:`grpo_kit.training.checks.check_settings` refuses, before anything loads, what TRL and Unsloth would
refuse only after the model loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import FrozenInstanceError, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.policy.devices import Gpu, cuda_available, first_gpu
from grpo_kit.policy.loading import LORA_TARGETS, Loading, import_unsloth
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR
from grpo_kit.system.files import read_yaml, write_text
from grpo_kit.system.install import installed_version
from grpo_kit.system.logs import counted
from grpo_kit.training.algorithms import get_algorithm
from grpo_kit.training.recipe_keys import STALE, read_keys, refusals, renamed_argv, unread

__all__ = ["PLAN_FIELDS", "PRESETS", "RECIPES_DIR", "RESUMABLE_FIELDS", "KitArgs", "Recipe", "command_line",
           "device_preset", "get_preset", "preset_for_device", "recipe_task", "recipe_yaml", "unsloth_first"]

log = logging.getLogger(__name__)

#: The shipped recipes, one YAML file each (``--preset NAME`` is ``--config grpo_kit/recipes/NAME.yaml``).
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


@dataclass
class KitArgs:
    """The keys a recipe adds to TRL's ``GRPOConfig`` and ``ModelConfig``.

    Attributes:
        name: the recipe's name (default: its file's name without ``.yaml``).
        description: one paragraph on what the recipe is for (``python -m grpo_kit presets`` prints it).
        algorithm: a named GRPO variant (:data:`grpo_kit.training.algorithms.ALGORITHMS`): its ``GRPOConfig`` values
            apply first, and the recipe's own keys over them.
        use_unsloth: load and train through Unsloth (``FastLanguageModel``; LoRA, or QLoRA with ``load_in_4bit``).
        fast_inference: Unsloth's colocated vLLM, sharing the weights (LoRA only); TRL's own vLLM is ``use_vllm``.
        max_seq_length: Unsloth's context length in tokens (prompt and completion).
        max_prompt_tokens: longer prompts are dropped from the training data (TRL 0.28 removed
            ``max_prompt_length``).
        dataset_answer_column, answer_type: where a recipe names its data (``dataset_name``, TRL's script key), the
            column holding each question's gold answer and how it is checked (a task file's ``answer`` and
            ``answer_type``). The defaults are TRL's: its ``accuracy_reward`` reads ``solution`` with math-verify.
    """

    name: str = field(default="", metadata={"help": "The recipe's name (default: its file's)."})
    description: str = field(default="", metadata={"help": "What the recipe is for."})
    algorithm: str = field(default="trl_default", metadata={"help": "A named GRPO variant (grpo_kit algorithms)."})
    use_unsloth: bool = field(default=False, metadata={"help": "Load and train through Unsloth."})
    fast_inference: bool = field(default=False, metadata={"help": "Unsloth's colocated vLLM (LoRA only)."})
    max_seq_length: int = field(default=512, metadata={"help": "Unsloth's context length, in tokens."})
    max_prompt_tokens: int = field(default=256, metadata={"help": "Longer prompts are dropped, in tokens."})
    dataset_answer_column: str = field(default="solution", metadata={"help": "The data set's gold answer column."})
    answer_type: str = field(default="math", metadata={"help": "How answers are checked: number, text, math, choice."})


#: Fields a resumed run may change: how long it runs and how it saves and logs, not what it trains.
RESUMABLE_FIELDS = frozenset({"max_steps", "save_steps", "save_total_limit", "logging_steps", "report_to",
                              "description"})
#: Of those, the run's plan: recorded in ``train_settings.json`` and kept by a resume that does not change them.
PLAN_FIELDS = ("max_steps", "save_steps", "save_total_limit", "logging_steps")


@dataclass
class _OpenR1Args:
    """open-r1's two script keys beside ``trl grpo``'s (``GRPOScriptArguments`` and ``GRPOConfig`` in open-r1's
    ``src/open_r1/configs.py``)."""

    dataset_prompt_column: str = field(default="prompt", metadata={"help": "The data set's question column."})
    system_prompt: str | None = field(default=None, metadata={"help": "The task's system prompt."})


def _recipe_dataclasses() -> tuple[Any, ...]:
    """The dataclasses whose fields are a recipe's keys: ``GRPOConfig``, ``ModelConfig``, the kit's keys, and the
    script keys of ``trl grpo`` (``DatasetMixtureConfig``, ``GRPOScriptArguments``) and open-r1."""
    from trl import GRPOConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments
    from trl.scripts.utils import DatasetMixtureConfig

    return GRPOConfig, ModelConfig, KitArgs, DatasetMixtureConfig, GRPOScriptArguments, _OpenR1Args


def _parser() -> Any:
    """A fresh ``TrlParser`` over :func:`_recipe_dataclasses`, each parse setting its defaults from a recipe, so none
    is shared. ``exit_on_error=False``: a bad value raises; ``allow_abbrev=False``: a misspelled key is refused, not
    read as the key it begins."""
    from trl import TrlParser

    return TrlParser(_recipe_dataclasses(), exit_on_error=False, allow_abbrev=False)


@functools.cache
def _defaults() -> dict[str, Any]:
    """Every key a recipe can hold, with TRL's (or the kit's) default."""
    return dict(vars(_parser().parse_known_args([])[0]))


@functools.cache
def _grpo_fields() -> frozenset[str]:
    """``GRPOConfig``'s field names."""
    from trl import GRPOConfig

    return frozenset(f.name for f in fields(GRPOConfig))


if TYPE_CHECKING:  # type checkers and IDEs read a recipe's keys, typed, from the dataclasses themselves
    from trl import GRPOConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments
    from trl.scripts.utils import DatasetMixtureConfig

    class _RecipeKeys(GRPOConfig, ModelConfig, KitArgs, DatasetMixtureConfig, GRPOScriptArguments, _OpenR1Args):
        """Every field of :func:`_recipe_dataclasses`, as the attributes of a :class:`Recipe`."""
else:  # at run time Recipe.__init__ sets them: importing TRL here would import transformers before Unsloth can
    _RecipeKeys = object


class Recipe(_RecipeKeys):
    """A recipe read by :func:`get_preset`: its name and the keys it sets, typed by TRL's parser.

    Every ``GRPOConfig``, ``ModelConfig``, :class:`KitArgs` and script key is an attribute (``recipe.learning_rate``):
    the recipe's value, else TRL's (or the kit's) default; ``settings`` holds only the keys the recipe sets. Type
    checkers and IDEs read the attributes' types from those dataclasses; ``dir(recipe)`` lists them. A recipe is
    read-only: :func:`get_preset` makes one with keys changed. Lengths are in tokens; ``per_device_train_batch_size``
    counts completions (TRL), so each optimiser step sees ``per_device_train_batch_size *
    gradient_accumulation_steps * processes / num_generations`` prompts. ``save_steps`` is the checkpoint interval: a
    killed run loses at most that many steps (``python -m grpo_kit train --resume``).

    >>> recipe = PRESETS["a100"]
    >>> recipe.learning_rate, recipe.settings["learning_rate"], recipe.adam_epsilon, "adam_epsilon" in recipe.settings
    (5e-06, 5e-06, 1e-08, False)
    """

    name: str
    settings: Mapping[str, Any]

    def __init__(self, name: str, settings: Mapping[str, Any]) -> None:
        """``name``: the recipe's; ``settings``: the keys it sets (a key of no dataclass is kept there, and is no
        attribute: :func:`get_preset` refuses such keys, a run folder's record may hold an older version's)."""
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "settings", settings)
        for key, default in _defaults().items():
            if key != "name":  # KitArgs' name is the recipe's own
                object.__setattr__(self, key, settings.get(key, default))

    def __setattr__(self, key: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {key!r}: a recipe is read-only (get_preset(recipe, "
                                  f"{key}=...) makes one with it changed)")

    def __delattr__(self, key: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {key!r}: a recipe is read-only")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Recipe):
            return NotImplemented
        return (self.name, self.settings) == (other.name, other.settings)

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}(name={self.name!r}, settings={self.settings!r})"

    @property
    def prompts_per_step(self) -> int:
        """Prompts one process sees per optimiser step: ``per_device_train_batch_size * gradient_accumulation_steps``
        completions, ``num_generations`` per prompt (TRL's grouping)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps // self.num_generations

    @property
    def sampling_temperature(self) -> float:
        """The temperature completions are sampled at: ``generation_kwargs``' ``temperature`` where it sets one, since
        TRL's ``GRPOTrainer`` applies ``generation_kwargs`` over its own sampling settings (trl 1.15
        ``grpo_trainer.py``: ``generation_kwargs.update(args.generation_kwargs)``; the same for vLLM's
        ``SamplingParams``), else ``temperature``, which the loss always divides the logits by.

        >>> PRESETS["a100"].sampling_temperature, PRESETS["a100"].temperature
        (0.9, 1.0)
        """
        return float((self.generation_kwargs or {}).get("temperature", self.temperature))

    @property
    def eval_strategy_name(self) -> str:
        """``eval_strategy`` as text (``"no"``, ``"steps"`` or ``"epoch"``): TRL's parser types it as transformers'
        ``IntervalStrategy`` enum, a value set in Python may be the string."""
        return str(getattr(self.eval_strategy, "value", self.eval_strategy))

    @property
    def heldout_batch_size(self) -> int:
        """Questions per ``generate`` call of the held-out evaluation during training: ``per_device_eval_batch_size``
        where the recipe sets it (TRL's evaluation batch, one greedy completion a question), else 64."""
        return self.per_device_eval_batch_size if "per_device_eval_batch_size" in self.settings else 64

    @property
    def model(self) -> str | None:
        """``model_name_or_path``: a Hub id or folder; ``None`` is the kit's tiny offline policy."""
        return self.settings.get("model_name_or_path")

    @property
    def lora_rank(self) -> int | None:
        """The LoRA rank (``lora_r``) with ``use_peft``; ``None`` is full fine-tuning."""
        return self.lora_r if self.use_peft else None

    @property
    def vllm_max_model_len(self) -> int:
        """vLLM's context length for this recipe, in tokens: Unsloth's engine holds ``max_seq_length``; TRL's takes
        ``vllm_max_model_length`` where the recipe sets it, else the longest prompt kept plus the completion budget.

        TRL passes ``GRPOConfig.vllm_max_model_length`` to its colocated engine; left unset, vLLM takes the
        model's own maximum (131,072 tokens for Llama-3.1-8B, whose KV cache is 128 KiB a token in bfloat16:
        16 GiB for one such sequence), and refuses to start when its memory share cannot hold one, so
        :meth:`grpo_kwargs` passes this length. A server (``vllm_mode="server"``) takes it as ``--max-model-len``.

        >>> PRESETS["multi-gpu-lora"].vllm_max_model_len
        512
        """
        if self.use_unsloth:
            return self.max_seq_length
        return int(self.vllm_max_model_length or self.max_prompt_tokens + self.max_completion_length)

    @property
    def loading(self) -> Loading:
        """How this recipe loads its policy (what the policy wing needs of it): the route, the adapter's ModelConfig
        keys (where the recipe names no ``lora_target_modules``, the kit's :data:`LORA_TARGETS`) and the model's
        ``from_pretrained`` keys (:attr:`model_kwargs`)."""
        targets = self.lora_target_modules or LORA_TARGETS
        return Loading(use_unsloth=self.use_unsloth, load_in_4bit=self.load_in_4bit,
                       fast_inference=self.fast_inference, lora_rank=self.lora_rank, lora_alpha=self.lora_alpha,
                       lora_target_modules=targets if isinstance(targets, str) else tuple(targets),
                       max_seq_length=self.max_seq_length, gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                       seed=self.seed, lora_dropout=self.lora_dropout, use_rslora=self.use_rslora,
                       use_dora=self.use_dora, lora_modules_to_save=_tuple_or_none(self.lora_modules_to_save),
                       lora_target_parameters=_tuple_or_none(self.lora_target_parameters),
                       model_kwargs=self.model_kwargs)

    @property
    def model_kwargs(self) -> dict[str, Any]:
        """The model's ``from_pretrained`` keyword arguments the recipe gives, as TRL's ``trl/scripts/grpo.py`` builds
        them: ``model_revision`` as ``revision``, ``trust_remote_code``, ``attn_implementation`` and ``dtype``, then
        ``model_init_kwargs`` over them. Only what the recipe sets: where it sets no ``dtype``, the kit's placement
        decides it (:func:`grpo_kit.policy.devices.placement`: a 16-bit frozen base for LoRA, float32 master weights
        for full fine-tuning), not TRL's float32 default.

        >>> get_preset("cpu-tiny", argv=["--torch_dtype", "bfloat16", "--model_revision", "v2"]).model_kwargs
        {'revision': 'v2', 'dtype': 'bfloat16'}
        """
        key_of = {"revision": "model_revision", "trust_remote_code": "trust_remote_code",
                  "attn_implementation": "attn_implementation", "dtype": "dtype"}
        kwargs = {arg: self.settings[key] for arg, key in key_of.items() if key in self.settings}
        return {**kwargs, **(self.model_init_kwargs or {})}

    def data_task(self) -> dict[str, Any] | None:
        """The task file the recipe's data keys amount to, as ``trl grpo`` (and open-r1's script) read them:
        ``dataset_name`` (a Hub id or a local folder) with ``dataset_config``, ``dataset_train_split`` and
        ``dataset_test_split`` is its ``hub:``, ``dataset_prompt_column`` its question field, ``system_prompt`` its
        system prompt; ``dataset_answer_column`` and ``answer_type`` say how answers are checked. ``None``: the recipe
        names no data set (the run's ``--task`` or the kit's default task gives it).

        """
        if self.dataset_name is None:
            return None
        path = Path(self.dataset_name).expanduser()
        hub = {"path": str(path.resolve()) if path.is_dir() else self.dataset_name, "name": self.dataset_config,
               "train_split": self.dataset_train_split, "test_split": self.dataset_test_split}
        data = {"name": path.name or self.name, "description": f"{self.dataset_name}, as recipe {self.name} names it",
                "hub": {k: v for k, v in hub.items() if v is not None}, "question": self.dataset_prompt_column,
                "answer": self.dataset_answer_column, "answer_type": self.answer_type}
        if self.dataset_answer_column == "solution":  # TRL's accuracy_reward reads it as it is written
            data["solution"] = "solution"
        return {**data, **({"system_prompt": self.system_prompt} if self.system_prompt else {})}

    def taken(self) -> list[str]:
        """What the kit makes of the keys TRL's and open-r1's scripts read themselves (the data set, the rewards, the
        run folder, evaluation, epochs) and of those it sets aside, one line each: the run's first lines say them."""
        lines = []
        if (data := self.data_task()) is not None:
            lines.append(f"data: {self.dataset_name}" + (f" ({self.dataset_config})" if self.dataset_config else "")
                         + f", splits {self.dataset_train_split}/{self.dataset_test_split}, question column "
                         f"{data['question']}, answers in {data['answer']} checked as {data['answer_type']}"
                         + (", the recipe's system_prompt" if self.system_prompt else ""))
        weights = ", ".join(f"{w:g}" for w in self.reward_weights or ())
        if self.reward_funcs:
            lines.append(f"rewards: reward_funcs {', '.join(self.reward_funcs)}"
                         + (f" weighted {weights}" if weights else ""))
        elif weights:
            lines.append(f"reward_weights {weights} weigh the task's rewards")
        if self.settings.get("output_dir"):
            lines.append(f"run folder: output_dir {self.output_dir} (unless --run-dir names one)")
        if self.eval_strategy_name == "steps":
            lines.append(f"held-out accuracy every {counted(self.eval_steps or self.logging_steps, 'step')} "
                         "(eval_strategy steps) "
                         "on validation questions from the train split; the test split is kept for the before/after "
                         "table")
        if self.max_steps == -1:
            lines.append(f"max_steps -1: num_train_epochs {self.num_train_epochs:g} over the train split")
        if not self.use_peft and (lora := [k for k in _LORA_KEYS if k in self.settings]):
            lines.append(f"{', '.join(lora)} set aside: use_peft false trains every weight")
        return lines

    def grpo_kwargs(self, output_dir: str, reward_weights: Sequence[float]) -> dict[str, Any]:
        """What the trainer passes to TRL's ``GRPOConfig``: the recipe's own ``GRPOConfig`` keys (keys it does not set
        keep TRL's defaults, or on an Unsloth route those of Unsloth's generated config), the run's output folder
        and reward weights, and vLLM's context length where the recipe leaves it to vLLM (:attr:`vllm_max_model_len`).
        """
        # the kit measures held-out accuracy itself (grpo_kit.runs.spec.RunSpec.eval_steps), on validation questions:
        # TRL's own evaluation would need an eval data set
        kwargs = {k: v for k, v in self.settings.items() if k in _grpo_fields() and k not in _KIT_READS}
        if self.use_vllm and self.vllm_mode == "colocate" and self.vllm_max_model_length is None:
            kwargs["vllm_max_model_length"] = self.vllm_max_model_len
        return {**kwargs, "output_dir": output_dir, "reward_weights": list(reward_weights), "save_strategy": "steps"}


#: ``GRPOConfig`` keys the kit reads instead of passing them on: its own held-out evaluation runs on them
#: (:meth:`grpo_kit.runs.spec.RunSpec.resolve`), and its loader takes ``model_init_kwargs``
#: (:attr:`Recipe.model_kwargs`; TRL reads them only where it loads the model itself, from a name).
_KIT_READS = ("eval_strategy", "eval_steps", "eval_on_start", "per_device_eval_batch_size", "model_init_kwargs")
#: TRL's ``ModelConfig`` keys of the LoRA adapter (read with ``use_peft`` true).
_LORA_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_target_parameters",
              "lora_modules_to_save", "lora_task_type", "use_rslora", "use_dora")


def _tuple_or_none(names: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if names is None else (names,) if isinstance(names, str) else tuple(names)


def _file_of(source: str | os.PathLike) -> Path:
    """A shipped recipe's file by name, or the user's file."""
    path = RECIPES_DIR / f"{source}.yaml"
    if path.is_file():
        return path
    path = Path(source)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path  # read_yaml names a folder or a missing file
    close = difflib.get_close_matches(str(source), preset_names(), n=1)
    raise ValueError(f"unknown preset {str(source)!r}" + (f" (did you mean {close[0]}?)" if close else "")
                     + f": choose from {', '.join(preset_names())}, or give a recipe file (--config FILE)")


def _read_file(path: Path) -> dict[str, Any]:
    values = read_yaml(path, "a recipe")
    if not isinstance(values, dict):
        raise ValueError(f"recipe {path} is not a YAML mapping of GRPOConfig keys: write one key: value a line")
    if "env" in values:
        _set_env(path, values.pop("env"))
    return values


def _set_env(path: Path, env: Any) -> None:
    """A recipe's ``env:`` block: environment variables set for this process when the file is read, as ``trl``'s
    ``TrlParser.parse_args_and_config`` sets them (trl ``scripts/utils.py``), and said in one line, since a variable
    such as ``HF_HUB_OFFLINE`` or ``WANDB_MODE`` changes what the run does.

    Raises:
        ValueError: ``env`` is not a mapping of names to text, numbers or booleans.
    """
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float, bool))
                                            for k, v in env.items()):
        raise ValueError(f"recipe {path}: env must map environment variable names to values, e.g. env: "
                         f"{{WANDB_MODE: offline}}, got {env!r}")
    env = {k: str(v) for k, v in env.items()}
    assignments = [f"{k}={v}" + (f" (was {os.environ[k]})" if os.environ.get(k, v) != v else "")
                   for k, v in env.items()]
    os.environ.update(env)
    if assignments:
        log.warning(f"recipe {path} sets environment variables for this process (its env: block): "
                    f"{', '.join(assignments)}")


def _log_renamed(where: str, notices: Sequence[str]) -> None:
    """One line for the old key names read as today's (:data:`grpo_kit.training.recipe_keys.RENAMED`)."""
    if notices:
        log.warning(f"{where}: read {', '.join(notices)} (the names TRL {installed_version('trl')} reads)")


def _problems_line(clauses: Sequence[str], unknown: bool) -> str:
    """The clauses refusing a recipe's keys as one line, with what a recipe holds where a key was unknown."""
    return "; ".join(clauses) + (f": a recipe holds GRPOConfig, ModelConfig, trl grpo's and grpo_kit's own keys (trl "
                                 f"{installed_version('trl')})" if unknown else "")


def _command_line(argv: Sequence[str], say: bool = True) -> tuple[dict[str, Any], list[str]]:
    """:func:`command_line`'s keys, and one clause per key refused (gone or unknown) instead of raising; ``say``: the
    old names read as today's in one line."""
    argv, notices = renamed_argv(argv)
    if say:
        _log_renamed("the command line", notices)
    parser = _parser()
    for action in parser._actions:  # only what argv gives lands in the namespace
        action.default = argparse.SUPPRESS
    namespace, rest = _parse(parser, argv)
    keys = [a[2:].split("=")[0].replace("-", "_") for a in rest if a.startswith("--")]
    if rest and not keys:
        raise ValueError(f"recipe overrides {' '.join(rest)}: write each as --KEY VALUE (TRL's form)")
    keys = [k.removeprefix("no_") if k.removeprefix("no_") in STALE else k for k in keys]
    problems = refusals(keys, list(_defaults()), dash="--")
    return {k: _whole_steps(k, v) for k, v in vars(namespace).items()}, problems


def command_line(argv: Sequence[str], strict: bool = True) -> dict[str, Any]:
    """The recipe keys ``argv`` gives in TRL's command-line form (``--learning_rate 1e-5``, ``--learning-rate 1e-5``,
    ``--bf16 false``, ``--no_bf16``), typed by TRL's parser; only the keys given. A key given twice: the last wins,
    as on every command line. An old name (:data:`grpo_kit.training.recipe_keys.RENAMED`, e.g. ``--torch_dtype``) is
    read as today's, said in one line.

    ``strict=False`` leaves the keys refused out, and says nothing: for a caller that reads the same ``argv`` with
    :func:`get_preset` next, which says them with the recipe's own, in one line.

    Raises:
        ValueError: keys no parser knows or that are gone (:data:`grpo_kit.training.recipe_keys.STALE`), all in one
            line (``strict``); a value its key's type cannot read.

    >>> command_line(["--learning-rate", "1e-5", "--bf16", "false", "--max_steps", "5", "--max-steps", "7"])
    {'learning_rate': 1e-05, 'bf16': False, 'max_steps': 7}
    """
    values, problems = _command_line(argv, say=strict)
    if problems and strict:
        raise ValueError(_problems_line(problems, any(p.startswith("unknown") for p in problems)))
    return values


def _whole_steps(key: str, value: Any) -> Any:
    """transformers types the ``*_steps`` fields float (below 1: a share of ``max_steps``) and makes a whole one an int
    (``TrainingArguments.__post_init__``): so does the recipe, so that it records and prints 10, not 10.0."""
    return int(value) if key.endswith("_steps") and isinstance(value, float) and value >= 1 and value.is_integer() \
        else value


def _parse(parser: Any, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """``parser.parse_known_args(argv)``, a value its key's type cannot read said as one line (``ValueError``)."""
    try:
        return parser.parse_known_args(list(argv), namespace=argparse.Namespace())
    except argparse.ArgumentError as e:
        key = (e.argument_name or "?").split("/")[0].lstrip("-").replace("-", "_")
        raise ValueError(f"recipe key {key}: {e.message}") from None


def _typed(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` typed by TRL's parser (text read as the field's type)."""
    parser = _parser()
    types = {a.dest: a.type for a in parser._actions if a.type is not None}
    parser.set_defaults(**{k: _as_text(v, types.get(k)) for k, v in values.items()})
    parsed = vars(_parse(parser, [])[0])
    return {k: _whole_steps(k, parsed[k]) for k in values}


def _as_text(value: Any, kind: Any) -> Any:
    """A number or boolean for a field TRL's parser reads from text, as text, so that the parser reads it as the
    command line's would (``0`` for a boolean is false, ``0`` for a float ``0.0``, a whole float for an int an int);
    other values as they are."""
    if kind in (None, str) or isinstance(value, str) or not isinstance(value, (bool, int, float)):
        return value
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def get_preset(source: str | os.PathLike | Recipe | None, /, argv: Sequence[str] = (), **overrides: Any) -> Recipe:
    """Read a recipe and apply overrides.

    One winner rule: the recipe's keys, then ``overrides``, then ``argv`` (the command line); within ``argv`` the
    last of a key given twice. ``algorithm`` (given by any of them) applies that variant's values over the recipe's
    first, and every key given with it over those.

    Args:
        source: a shipped recipe's name (:data:`PRESETS`), a recipe file (YAML), a :class:`Recipe` (its keys are
            read again with the overrides), or ``None`` for the shipped recipe that fits this machine
            (:func:`preset_for_device`).
        argv: overrides in TRL's command-line form (``["--learning_rate", "1e-5"]``; :func:`command_line`).
        **overrides: keys to replace (Python values; text is read as the key's type).

    An old key name (:data:`grpo_kit.training.recipe_keys.RENAMED`: ``torch_dtype``, ``warmup_ratio`` below 1, ...)
    is read as today's, said in one logged line.

    Raises:
        ValueError: an unknown preset name; a recipe file that cannot be read (:func:`grpo_kit.system.files.read_yaml`:
            not UTF-8, not YAML, a key given twice); a value that cannot be read as its key's type; keys no parser
            knows (each with the closest one), keys that are gone (each with what to write instead:
            :data:`grpo_kit.training.recipe_keys.STALE`) and values the kit would not act on
            (:func:`grpo_kit.training.recipe_keys.unread`): all of them, of the file, the call and the command line,
            in one line.

    >>> get_preset("a100", max_steps=350).max_steps
    350
    >>> get_preset("cpu-tiny", argv=["--top_entropy_quantile", "0.2"]).top_entropy_quantile
    0.2
    """
    source = device_preset() if source is None else source
    problems: list[str] = []  # every key refused, of the file, the call and the command line: said in one line
    where = ""
    if isinstance(source, Recipe):
        name, values = source.name, dict(source.settings)
        _unsloth_first_if_asked(values, argv, overrides)
    else:
        path = _file_of(source)
        values = _read_file(path)
        _unsloth_first_if_asked(values, argv, overrides)  # before TRL's parser, in read_keys, imports TRL
        name = str(values.pop("name", None) or path.stem)
        values, notices, refused = read_keys(values, list(_defaults()))
        _log_renamed(f"recipe {path}", notices)
        problems, where = refused, f"{path}: " if refused else ""
        # the named variant's values first (TRL's defaults, written out, without one), the recipe's own keys over them
        values = {**get_algorithm(values.get("algorithm", KitArgs.algorithm)).fields, **values}
    overrides, notices, refused = read_keys(overrides, list(_defaults()))
    _log_renamed("the call's keys", notices)
    argv_values, argv_refused = _command_line(argv)
    problems += refused + argv_refused
    overrides = {**overrides, **argv_values}
    if "name" in overrides and overrides["name"] != name:
        raise ValueError("name is the recipe's own name: choose a recipe with --preset or --config (python -m "
                         "grpo_kit presets lists the shipped ones) and change its keys, not its name")
    if "algorithm" in overrides:  # a variant replaces the recipe's algorithm keys; the other overrides come last
        values.update(get_algorithm(overrides["algorithm"]).fields)
    recipe = Recipe(name, {k: v for k, v in _typed({**values, **overrides}).items() if k != "name"})
    if values_refused := unread(recipe, _defaults()):
        where, problems = where or f"recipe {name!r}: ", problems + values_refused
    if problems:
        raise ValueError(where + _problems_line(problems, any("unknown recipe key" in p for p in problems)))
    return recipe


def unsloth_first(source: str | os.PathLike | Recipe | None, argv: Sequence[str] = (),
                  overrides: Mapping[str, Any] | None = None) -> None:
    """Import Unsloth before anything imports TRL, where the recipe ``source`` with ``overrides`` and ``argv`` (as
    :func:`get_preset` takes them) trains through Unsloth on a GPU: Unsloth patches transformers, TRL and peft when it
    is imported and the kit refuses it after them (:func:`grpo_kit.policy.loading.import_unsloth`), while reading a
    recipe builds TRL's parser, which imports TRL. For a caller that parses ``argv`` before :func:`get_preset` reads
    the recipe (:meth:`grpo_kit.runs.spec.RunSpec.resolve`); :func:`get_preset` itself checks the keys it reads.
    A recipe that cannot be read is left to :func:`get_preset` to refuse.

    Raises:
        RuntimeError: transformers, TRL or peft were imported before Unsloth in this process.
    """
    written: Any = {}
    if isinstance(source, Recipe):
        written = source.settings
    elif source is not None:
        with contextlib.suppress(ValueError, OSError):  # get_preset says why in its own line
            written = read_yaml(_file_of(source), "a recipe")
    _unsloth_first_if_asked(written if isinstance(written, Mapping) else {}, argv, overrides or {})


def _unsloth_first_if_asked(written: Mapping[str, Any], argv: Sequence[str], overrides: Mapping[str, Any]) -> None:
    """Import Unsloth where ``use_unsloth`` is true as written, without TRL's parser (:func:`_asks_unsloth`), on a
    GPU with Unsloth installed; elsewhere there is nothing to patch."""
    import importlib.util

    if _asks_unsloth(written, argv, overrides) and importlib.util.find_spec("unsloth") is not None \
            and cuda_available():
        import_unsloth()  # once imported, it returns the module


def _asks_unsloth(written: Mapping[str, Any], argv: Sequence[str], overrides: Mapping[str, Any]) -> bool:
    """Whether ``use_unsloth`` is true as written: the recipe's keys, then the call's, then the command line's last
    (``--use_unsloth VALUE``, ``--use-unsloth=VALUE``, a bare ``--use_unsloth``, ``--no_use_unsloth``)."""
    said = overrides.get("use_unsloth", written.get("use_unsloth"))
    for at, token in enumerate(argv):
        option, equals, value = token.partition("=")
        key = option[2:].replace("-", "_") if option.startswith("--") else ""
        if key == "no_use_unsloth":
            said = False
        elif key == "use_unsloth":
            following = argv[at + 1] if at + 1 < len(argv) else "--"
            said = value if equals else ("true" if following.startswith("--") else following)
    return str(said).lower() in ("true", "1", "yes")


def recipe_task(preset: Recipe, cache_dir: str = DEFAULT_CACHE_DIR) -> str | None:
    """The task file of the recipe's data keys (:meth:`Recipe.data_task`), written once into the kit's cache under a
    name that holds its content's SHA-256, so that run folders record it as any task file and read it back; ``None``
    when the recipe names no data set."""
    import yaml

    if (data := preset.data_task()) is None:
        return None
    text = (f"# The data keys of recipe {preset.name!r} as a task file: python -m grpo_kit train --task THIS_FILE\n"
            + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110))
    path = Path(cache_dir, "tasks", f"{data['name']}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml").resolve()
    if not path.is_file():
        write_text(path, text)
    return str(path)


def recipe_yaml(recipe: Recipe) -> str:
    """``recipe`` as a YAML recipe file (``--config`` reads it back; the run folder keeps it as ``recipe.yaml``)."""
    import yaml

    settings = {"name": recipe.name, **recipe.settings}
    return (f"# recipe {recipe.name!r} as this run resolved it: python -m grpo_kit train --config THIS_FILE\n"
            + yaml.safe_dump({k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
                             sort_keys=False, width=110))


def preset_names() -> list[str]:
    """The shipped recipes' names, in the order ``python -m grpo_kit presets`` lists them."""
    order = ("a100", "colab-t4", "colab-l4", "full-80gb", "multi-gpu-lora", "multi-gpu-full", "cpu-tiny")
    names = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
    return [n for n in order if n in names] + [n for n in names if n not in order]


class _Shipped(Mapping[str, Recipe]):
    """The shipped recipes by name, each read on first use (reading one imports TRL)."""

    def __getitem__(self, name: str) -> Recipe:
        if name not in preset_names():
            raise KeyError(name)
        return _shipped(name)

    def __iter__(self) -> Iterator[str]:
        return iter(preset_names())

    def __len__(self) -> int:
        return len(preset_names())


@functools.cache
def _shipped(name: str) -> Recipe:
    return get_preset(name)


#: The shipped recipes (``grpo_kit/recipes/*.yaml``) by name.
PRESETS: Mapping[str, Recipe] = _Shipped()


def preset_for_device(gpu: Gpu | None) -> str:
    """The preset that fits a card: ``colab-t4`` on a GPU without bfloat16 (T4, V100), ``colab-l4`` on one with it and
    under 30 GiB (an L4, 24 GB: ``a100``'s 8B recipe would take about 10 h there with vLLM, 33 without), ``a100`` on
    a larger one (A100, H100, H200), ``cpu-tiny`` without a GPU.

    >>> preset_for_device(Gpu("Tesla T4", 15.0, bf16=False)), preset_for_device(Gpu("NVIDIA A100-SXM4-40GB", 40, True))
    ('colab-t4', 'a100')
    >>> preset_for_device(Gpu("NVIDIA L4", 22.0, bf16=True)), preset_for_device(None)
    ('colab-l4', 'cpu-tiny')
    """
    return "cpu-tiny" if gpu is None else "colab-t4" if not gpu.bf16 else "colab-l4" if gpu.memory_gib < 30 else "a100"


def device_preset() -> str:
    """The preset that fits this machine's first GPU (:func:`preset_for_device`)."""
    return preset_for_device(first_gpu())

