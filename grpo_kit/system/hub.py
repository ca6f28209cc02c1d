"""The Hugging Face Hub as the kit meets it before anything downloads or uploads: offline mode, the token, whether the
Hub answers, and repository names, each read with huggingface_hub's own helpers, so that a step that needs the Hub
says in one line what is missing instead of failing in a library's retries. :func:`unreachable` asks the same of any
server (wandb's too).
"""

from __future__ import annotations

__all__ = ["hub_offline", "hub_problem", "is_repo_id", "unreachable", "upload_token"]


def unreachable(url: str, timeout_s: float) -> str | None:
    """Why ``url``'s host does not accept a TCP connection within ``timeout_s`` seconds (the system's words, e.g.
    ``"Name or service not known"``), or ``None`` when it does. The port is the URL's, else 443 for ``https`` and 80
    otherwise; nothing is sent. A library's own client would retry for half a minute or more instead."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(url)
    address = (parsed.hostname or "", parsed.port or (443 if parsed.scheme == "https" else 80))
    try:
        socket.create_connection(address, timeout_s).close()
    except OSError as e:
        return e.strerror or str(e)
    return None


def hub_offline() -> bool:
    """Whether the Hub is switched off: ``HF_HUB_OFFLINE`` as huggingface_hub read it when imported
    (``huggingface_hub.is_offline_mode``), or as set since (a recipe's ``env:`` block, a notebook cell)."""
    import os

    from huggingface_hub import is_offline_mode

    return is_offline_mode() or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_problem(what: str, token: bool = True, timeout_s: float = 5.0) -> str | None:
    """Why the Hub cannot serve ``what`` here, or ``None``: offline mode, no token (with ``token``), or no answer
    from the Hub's host within ``timeout_s`` seconds (datasets and huggingface_hub would retry for half a minute or
    more before they give up).

    Args:
        what: what needs the Hub, to start the line (e.g. ``"push_to_hub uploads every checkpoint"``).
        token: a token is needed too (an upload).
        timeout_s: how long the Hub's host may take to accept a connection.
    """
    from huggingface_hub import constants, get_token

    if hub_offline():
        return f"{what}, and HF_HUB_OFFLINE is set"
    if token and not get_token():
        return f"{what}, and there is no Hugging Face token here (set HF_TOKEN or run `hf auth login`)"
    if (why := unreachable(constants.ENDPOINT, timeout_s)) is not None:
        return f"{what}, and the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached ({why})"
    return None


def is_repo_id(text: str, owner: bool = False) -> bool:
    """Whether ``text`` is a Hub repository's name, ``name`` or ``owner/name`` (``owner``: only the latter), in the
    Hub's characters (``huggingface_hub.utils.validate_repo_id``).

    >>> is_repo_id("Qwen/Qwen2.5-0.5B-Instruct"), is_repo_id("gpt2"), is_repo_id("gpt2", owner=True)
    (True, True, False)
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return not owner or text.count("/") == 1


def upload_token(repo_id: str, token: str | None = None, option: str = "--push-to-hub") -> str:
    """The token to upload to ``repo_id`` with (``token``, else huggingface_hub's ``get_token``: ``HF_TOKEN`` or
    ``hf auth login``), checked before any work: the name, offline mode, a token. Whether the Hub answers, and takes
    the token, is for the upload's first request to say.

    Raises:
        ValueError: ``repo_id`` is not ``owner/name`` in the Hub's characters (:func:`is_repo_id`).
        ConnectionError: ``HF_HUB_OFFLINE`` is set (:func:`hub_offline`).
        PermissionError: no token.
    """
    from huggingface_hub import get_token

    if not is_repo_id(repo_id, owner=True):
        raise ValueError(f"{option} takes owner/name (e.g. you/qwen-grpo-gsm), got {repo_id!r}")
    if hub_offline():
        raise ConnectionError(f"{option} {repo_id} uploads to the Hugging Face Hub, and HF_HUB_OFFLINE is set: unset "
                              "it to upload; nothing was uploaded")
    if not (token := token or get_token()):
        raise PermissionError("no Hugging Face token: set HF_TOKEN or run `hf auth login`; nothing was uploaded")
    return token
