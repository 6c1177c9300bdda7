"""Cell leases (scaling.trial.leases) under real concurrency: real processes race for one lease, a lease whose
owner died or stopped beating is taken over, a live one never is."""

import json
import os
import socket
import subprocess
import sys
import time

from scaling.trial.leases import Holder, Lease, Leases

RACER = """
import sys, time
from scaling.trial.leases import Lease, Leases
storage, key, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
got = Leases(storage).acquire(key, driver=f"racer {sys.argv[4]}")
if isinstance(got, Lease):
    got.record()
print("won" if isinstance(got, Lease) else "lost", flush=True)
time.sleep(1.0)             # hold it while the others try
"""


def test_eight_processes_racing_for_one_lease_one_wins(tmp_path):
    start = time.time() + 2.0
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(tmp_path), "cellkey", str(start), str(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    outcomes = [p.communicate(timeout=60)[0].strip() for p in racers]
    assert sorted(outcomes) == ["lost"] * 7 + ["won"], outcomes
    assert len(Leases(str(tmp_path)).history("cellkey")) == 1  # one owner ever trained it


def test_a_live_lease_is_not_taken_and_names_its_holder(tmp_path):
    leases = Leases(str(tmp_path))
    mine = leases.acquire("k", driver="driver A")
    assert isinstance(mine, Lease)
    mine.record()
    other = Leases(str(tmp_path)).acquire("k", driver="driver B")
    assert isinstance(other, Holder) and other.driver == "driver A" and "driver A" in other.describe()
    mine.release()
    assert leases.holder("k") is None
    again = leases.acquire("k", driver="driver B")
    assert isinstance(again, Lease)
    again.record()
    again.release()
    assert [h["driver"] for h in leases.history("k")] == ["driver A", "driver B"]


def write_lease(tmp_path, key, **fields):
    now = time.time()
    holder = {
        "owner": "someone",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "driver": "old driver",
        "heartbeat": now,
        "taken": now,
        **fields,
    }
    (tmp_path / "leases").mkdir(exist_ok=True)
    (tmp_path / "leases" / f"{key}.json").write_text(json.dumps(holder))


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_lease(tmp_path, "k", pid=dead.pid)
    got = Leases(str(tmp_path)).acquire("k", driver="rerun")
    assert isinstance(got, Lease)
    got.record()
    assert Leases(str(tmp_path)).history("k")[-1]["took_over"] == "someone"
    got.release()


def test_a_lease_without_heartbeat_goes_stale_and_a_fresh_one_does_not(tmp_path):
    write_lease(tmp_path, "fresh", host="another-host")
    write_lease(tmp_path, "stale", host="another-host", heartbeat=time.time() - 3600)
    leases = Leases(str(tmp_path))
    assert isinstance(leases.acquire("fresh"), Holder)
    taken = leases.acquire("stale")
    assert isinstance(taken, Lease)
    taken.release()


def test_an_owner_whose_lease_was_taken_over_learns_it_and_does_not_release_the_new_one(tmp_path):
    leases = Leases(str(tmp_path))
    first = leases.acquire("k", driver="first")
    assert isinstance(first, Lease)
    first._stop.set()  # its heartbeat stops (a stalled process)
    data = json.loads((tmp_path / "leases" / "k.json").read_text())
    data.update(heartbeat=time.time() - 3600, host="another-host")
    (tmp_path / "leases" / "k.json").write_text(json.dumps(data))
    second = leases.acquire("k", driver="second")
    assert isinstance(second, Lease)
    assert leases.renew("k", first.holder.owner) is False
    first.release()  # must leave the second's lease alone
    assert leases.holder("k").driver == "second"
    second.release()
