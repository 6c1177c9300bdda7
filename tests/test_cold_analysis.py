"""benchmarks/cold_analysis.py's load sampler: the load average seen while a timed run ran."""

import os
import time

from benchmarks.cold_analysis import LoadSampler


def test_load_sampler_records_the_load_during_the_block():
    with LoadSampler() as during:
        time.sleep(1.2)
    summary = during.summary()
    assert len(during.samples) >= 3  # at the start, each second, at the end
    assert set(summary) == {"load_mean", "load_max"}
    assert 0 <= summary["load_mean"] <= summary["load_max"]
    assert summary["load_max"] == round(max(during.samples), 2)
    assert not during.thread.is_alive()
    assert os.getloadavg()[0] >= 0
