"""Moved to collectors/common/sdnotify.py (the collector tiers use it too): this old name is an alias of
that module (the same module object, so patching either patches both)."""

from __future__ import annotations

import sys

from collectors.common import sdnotify as _sdnotify

sys.modules[__name__] = _sdnotify
