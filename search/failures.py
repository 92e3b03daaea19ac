"""One line for a failure that is not the user's input: a storage whose disk is full or that
went away (instead of Optuna's "invalid data in the commit" or "Should not reach"), and worker
processes that failed. Used by the command (:mod:`search.cli`) and by each worker process."""

from __future__ import annotations

import errno
import re

__all__ = ["WorkersFailed", "os_error", "storage_failure", "failure_line", "mask_credentials"]

#: ``scheme://user:password@host``: the password of a database URL
_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)[^@\s]*@")


def mask_credentials(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``
    (``postgresql://postgres:***@host/db``): what palm-tune prints or logs never shows one."""
    return _PASSWORD.sub(r"\1***@", text)


class WorkersFailed(RuntimeError):
    """Worker processes exited with an error (each said why on stderr)."""


_FULL = ("disk is full", "No space left", "File too large", "disk I/O error")


def os_error(exc: OSError) -> str:
    """One line for an OS error; a full disk (ENOSPC, EFBIG, EDQUOT) says that nothing was lost."""
    where = f" ({exc.filename})" if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return f"the disk is full{where}: {reason}; nothing was lost, free space and run again"
    return f"{reason}{where}"


def storage_failure(exc: BaseException) -> str | None:
    """One line for a storage that failed under us (a full disk, a lost database), instead
    of Optuna's "invalid data in the commit": the root cause from the exception chain."""
    chain: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and node not in chain:
        chain.append(node)
        node = node.__cause__ or node.__context__
    for e in chain:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return os_error(e)
    text = " ".join(" ".join(str(e).split()) for e in chain)
    if any(word in text for word in _FULL):
        return (
            "the storage's disk is full (or failed to write); the trials committed before "
            "are kept: free space and run again"
        )
    # Optuna wraps a failed commit in StorageInternalError; what reaches us may be a later
    # exception raised while handling it (Optuna's own UnboundLocalError when the database
    # went away during a trial's tell), so the whole chain is searched
    if any(type(e).__name__ == "StorageInternalError" for e in chain):
        root = chain[-1]
        message = mask_credentials(" ".join(str(root).split())[:200])
        return f"the storage failed: {type(root).__name__}: {message}"
    return None


def failure_line(exc: BaseException) -> str:
    """What to print for an unexpected exception: the storage failure behind it, or its type
    and first words."""
    storage = storage_failure(exc)
    if storage:
        return storage
    message = mask_credentials(" ".join(str(exc).split())) or type(exc).__name__
    return f"{type(exc).__name__}: {message}"
