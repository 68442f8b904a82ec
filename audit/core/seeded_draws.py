"""Hypothesis draws that depend on the seed alone.

hypothesis (6.1xx) draws, now and then, a number that appears as a literal in a *local* module loaded at that
moment (its "local constants": any module outside site-packages and the stdlib -- so ours). Whatever the audit
draws with hypothesis (the stress batches, the samples door's proxy corruptions) would then depend on which of
our modules happen to be imported when it draws, and on whether the repo is installed editable: two draws of the
stress batches in one process differed (a replaced share of 0.999, the Adam beta in rlhf/stacked.py, imported by
the first draw's training). Inside `seed_alone()` hypothesis sees no local constants and starts from an empty
constants cache, so a draw depends on its seed and hypothesis's version only. It touches private API of hypothesis
(releases with local constants; older ones, 6.100 say, have none and need nothing);
tests/test_stress.py::test_drawn_batches_depend_on_the_seed_alone fails if that moves.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def seed_alone():
    try:
        from hypothesis.internal.conjecture import providers as P
    except ImportError:          # a hypothesis from before local constants (6.100 has no providers module)
        P = None
    if not hasattr(P, "_get_local_constants"):
        yield                    # no local constants to draw: its draws depend on the seed alone already
        return
    from hypothesis.internal.cache import LRUCache   # with the feature, its internals (an error here is loud)
    saved = P._get_local_constants, P.CONSTANTS_CACHE
    empty = P.Constants(integers=P.SortedSet(), floats=P.SortedSet(key=P.float_to_int), bytes=P.SortedSet(),
                        strings=P.SortedSet())
    P._get_local_constants, P.CONSTANTS_CACHE = (lambda: empty), LRUCache(1024)
    try:
        yield
    finally:
        P._get_local_constants, P.CONSTANTS_CACHE = saved
