"""The policy: where it runs (devices, launches), where it comes from (a model or the kit's tiny policy, warm-started
once and cached), how it loads (transformers, peft, Unsloth) and how it generates (batched transformers, vLLM),
with a resumable generation cache and the one choice of evaluation route.
"""
