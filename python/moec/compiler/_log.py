"""The `moec` logger, configured from $MOEC_LOG.

MOEC_LOG=info (the default) prints, on stderr, a line per compile that took
longer than SLOW_COMPILE_S; debug prints every compile and cache lookup;
warning or error print less; none leaves the logger as logging's defaults
have it (no handler of moec's: it propagates to the application's).
"""

from __future__ import annotations

import logging
import os
import sys

#: Compiles that take longer (seconds) are logged at INFO.
SLOW_COMPILE_S = 1.0

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR}


class _Stderr(logging.StreamHandler):
    """Writes to sys.stderr as it is when a record is logged (as logging's
    last-resort handler does), not as it was at import."""

    def __init__(self):
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr


def _configure() -> logging.Logger:
    logger = logging.getLogger("moec")
    setting = os.environ.get("MOEC_LOG", "info").strip().lower() or "info"
    if setting == "none":
        return logger
    if setting not in _LEVELS:
        print(f"moec: MOEC_LOG={setting!r} is not one of debug, info, "
              f"warning, error, none: using info", file=sys.stderr)
        setting = "info"
    logger.setLevel(_LEVELS[setting])
    if not any(getattr(h, "_moec", False) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("moec: %(message)s"))
        handler._moec = True
        logger.addHandler(handler)
    # The application's handlers would print the line a second time.
    logger.propagate = False
    return logger


logger = _configure()
