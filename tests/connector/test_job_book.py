"""The OffloadingConnector's job book: which store jobs watch which GPU blocks."""

from __future__ import annotations

import pytest

from impl.connector.offloading.job_book import JobBook
from vtwin.errors import ReleaseCheckFailed


def test_a_block_listed_twice_by_one_store_stops_like_upstream() -> None:
    """A windowed store can list one GPU block twice. Unwatching it the second time finds
    the job gone from the block's watchers: upstream crashes (a KeyError) whether no job or
    only other jobs still watch it, and the twin stops on the named release check, saying
    which; a block watched by several jobs stays watched by the others."""
    book = JobBook(enable_prefix_caching=True)
    book.watched_blocks = {7: {1}, 8: {1, 2}}
    book._unwatch(1, (8,))
    assert book.watched_blocks == {7: {1}, 8: {2}}
    with pytest.raises(ReleaseCheckFailed) as other_jobs:
        book._unwatch(1, (8,))
    assert other_jobs.value.check == "offloading-fence-twice"
    assert str(other_jobs.value) == (
        "release check 'offloading-fence-twice' fails: store job 1 unwatches GPU block 8, "
        "which only other jobs watch (it listed the block twice)")
    book._unwatch(1, (7,))
    assert book.watched_blocks == {8: {2}}
    with pytest.raises(ReleaseCheckFailed, match=r"GPU block 7, which no job watch \(it"):
        book._unwatch(1, (7,))
