"""The device-thread lifecycle every engine shares: a failure is reported, never a hang."""

from __future__ import annotations

import pytest

from placer.engines.failures import KernelError, StepTimeout
from placer.engines.threads import DeviceThread, DeviceThreads, Job


def test_a_device_that_cannot_be_set_up_is_an_error_not_a_hang():
    def broken_setup():
        raise RuntimeError("no such device")

    threads = DeviceThreads(lambda: [DeviceThread("cuda:7", lambda job: None, setup=broken_setup)])
    with pytest.raises(KernelError, match="cuda:7 could not be set up: RuntimeError: no such device"):
        threads.new_job(1.0)
    assert threads.threads == []


def test_a_thread_past_its_deadline_fails_the_step_and_the_others_stop():
    def slow(job: Job) -> None:
        while True:
            job.check("cpu:0", "after node", "loop")

    seen = []
    threads = DeviceThreads(lambda: [DeviceThread("cpu:0", slow), DeviceThread("cpu:1", lambda job: seen.append(1))])
    job = threads.new_job(0.05)
    with pytest.raises(StepTimeout, match="cpu:0 .after node 'loop'"):
        threads.run(job, 0.05)
    assert seen == [1] and threads.broken is None
    threads.close()
