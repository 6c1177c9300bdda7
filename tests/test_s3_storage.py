"""Checkpoints and leases on a real S3 API server on loopback (moto's, tests/s3_server.py), with the
credentials in the URI: a checkpoint round trip (newest, previous, a damaged one found and set aside, temp
files cleaned), leases, and the endpoint stopped for 10 s in the middle of a save: the save waits,
retries, goes through and says so once; an outage longer than the retry limit, or an error that waiting
cannot heal, is raised (the two outages are in the slow suite). The whole sweeps on S3 (a driver killed,
the endpoint down for 45 s) are in tests/test_s3_sweep.py (slow)."""

import logging
import threading
import time

import pytest
from s3_server import SECRET_KEY, s3_server

from scaling.trial import storage
from scaling.trial.checkpoints import CheckpointStore
from scaling.trial.leases import Lease, Leases


@pytest.fixture(scope="module")
def s3():
    with s3_server() as server:
        yield server


def test_join_puts_the_path_before_the_query():
    assert storage.join("s3://b/runs?endpoint_override=h:1&scheme=http", "smoke", "tune") == (
        "s3://b/runs/smoke/tune?endpoint_override=h:1&scheme=http"
    )
    assert storage.join("s3://b/runs/", "smoke") == "s3://b/runs/smoke"
    assert storage.join("/srv/runs?odd", "smoke") == "/srv/runs?odd/smoke"  # a path: no query


def test_a_checkpoint_round_trip_on_s3(s3):
    uri = storage.join(s3.uri(), "round-trip")
    store = CheckpointStore(uri)
    store.save("c1", {"step": 10, "w": [1.0, 2.0]})
    store.save("c1", {"step": 20, "w": [3.0]})
    assert store.load("c1") == {"step": 20, "w": [3.0]}
    files = s3.objects("runs/round-trip")
    assert sorted(files) == [
        f"{s3.bucket}/runs/round-trip/checkpoints/c1/previous.pt",
        f"{s3.bucket}/runs/round-trip/checkpoints/c1/state.pt",
    ]
    # a damaged newest file is found by its digest, set aside, and the previous one loads
    fs, root = storage.filesystem(uri)
    blob = files[f"{s3.bucket}/runs/round-trip/checkpoints/c1/state.pt"]
    with fs.open_output_stream(f"{root}/checkpoints/c1/state.pt") as out:
        out.write(blob[:-5] + b"xxxxx")
    assert store.load("c1")["step"] == 10 and "digest" in store.problems["c1"][0]
    assert f"{s3.bucket}/runs/round-trip/checkpoints/c1/state.pt.damaged" in s3.objects("runs/round-trip")
    # a save that died half way leaves a temp file: cleaned
    with fs.open_output_stream(f"{root}/checkpoints/c1/state.pt.0123.tmp") as out:
        out.write(b"half")
    store.clean(["c1"])
    assert not [k for k in s3.objects("runs/round-trip") if k.endswith(".tmp")]
    assert CheckpointStore(uri).step("c1") == 10


def test_leases_on_s3(s3):
    leases = Leases(storage.join(s3.uri(), "leases-test"))
    lease = leases.acquire("c1", "driver A")
    assert isinstance(lease, Lease)
    held = leases.acquire("c1", "driver B")
    assert not isinstance(held, Lease) and held.driver == "driver A"
    lease.release()
    assert leases.holder("c1") is None


def stopped_for(relay, seconds: float) -> threading.Thread:
    """Stop the endpoint now and start it again after ``seconds``, in a thread."""
    relay.stop()

    def later():
        time.sleep(seconds)
        relay.start()

    thread = threading.Thread(target=later, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow  # S3 outages played for real (as tests/test_outages.py); S3 itself: the tests around
def test_a_save_rides_through_a_short_outage_and_says_so_once(s3, caplog):
    uri = storage.join(s3.uri(), "outage")
    store = CheckpointStore(uri)
    store.save("c1", {"step": 1})
    heard = []
    storage.OUTAGES.listeners.append(heard.append)
    try:
        with caplog.at_level(logging.WARNING, logger="scaling.trial.storage"):
            back = stopped_for(s3.relay, 10.0)  # longer than pyarrow's own retries (~6 s)
            started = time.monotonic()
            store.save("c1", {"step": 2})  # waits for the endpoint, then goes through
            waited = time.monotonic() - started
            back.join()
    finally:
        storage.OUTAGES.listeners.remove(heard.append)
    assert waited >= 9.5, f"the save did not wait for the endpoint ({waited:.1f} s)"
    assert CheckpointStore(uri).load("c1") == {"step": 2}
    down = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    up = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
    assert len(down) == 1 and len(up) == 1 and len(heard) == 1, caplog.text
    assert "saving the checkpoint of cell c1" in down[0] and "retrying for up to 300 s" in down[0]
    assert SECRET_KEY not in caplog.text + heard[0]


@pytest.mark.slow  # an S3 outage, as above
def test_an_outage_longer_than_the_retry_limit_is_raised(s3, monkeypatch):
    uri = storage.join(s3.uri(), "long-outage")
    store = CheckpointStore(uri)
    monkeypatch.setenv("SCALING_STORAGE_RETRY_S", "2")
    back = stopped_for(s3.relay, 12.0)
    try:
        with pytest.raises(OSError, match="NETWORK_CONNECTION|connect"):
            store.save("c1", {"step": 1})
    finally:
        back.join()
    storage.OUTAGES.answered(storage.redact(uri.partition("?")[0]))


def test_an_error_that_waiting_cannot_heal_is_raised_at_once(s3):
    store = CheckpointStore(s3.uri().replace(f"{s3.bucket}/", "no-such-bucket/"))
    started = time.monotonic()
    with pytest.raises(OSError):
        store.save("c1", {"step": 1})
    assert time.monotonic() - started < 10


def test_tunes_filesystem_carries_no_secret_when_pickled(s3, monkeypatch):
    """Tune pickles its storage filesystem into its state in the bucket (tuner.pkl): one made with the
    URI's keys would carry the secret there; the keys go to the process's AWS variables instead."""
    import pickle

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # restored (unset) after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    settings = storage.tune_storage(storage.join(s3.uri(), "tune-state"))
    assert settings["storage_path"] == f"{s3.bucket}/runs/tune-state"
    assert SECRET_KEY.encode() not in pickle.dumps(settings["storage_filesystem"])
    with settings["storage_filesystem"].open_output_stream(f"{settings['storage_path']}/x") as out:
        out.write(b"written with the keys of the URI")
    assert storage.without_keys("s3://k:s%2Fx@b/p?q=1") == ("s3://b/p?q=1", ("k", "s/x"))
    assert storage.without_keys("s3://b/p") == ("s3://b/p", None)
