"""`placer train` cut by Ctrl-C in each phase (profiling, local search, REINFORCE, the real phase),
the profile cache that every run shares rewritten meanwhile, then `--resume` with the same
options: it ends where an uninterrupted run ends. The devices and the profiler are deterministic
fakes, so that "where it ends" is a fact, not a measurement."""

from __future__ import annotations

import importlib
import os
import json

import onnx
import pytest
import torch
from testgraphs import branches

from placer.cli import main
from placer.costmodel.profile import Profile, TransferStat
from placer.costmodel.profiled import ProfiledCostModel
from placer.costmodel.simulator import AnalyticCostModel, SimulatedMeasurer
from placer.graph.load import load_graph
from placer.placement import Placement
from placer.policy.checkpoint import FILENAME

QUICK = ["--hidden-size", "16", "--samples-per-update", "4", "--no-progress", "--no-compare", "--seed", "3"]


class Cut:
    """Ctrl-C at the `at`-th event of `phase` (profiling, simulated, real), once."""

    def __init__(self, phase: str | None = None, at: int = 1) -> None:
        self.phase, self.at, self.seen = phase, at, 0

    def tick(self, phase: str) -> None:
        if phase == self.phase:
            self.seen += 1
            if self.seen == self.at:
                self.phase = None
                raise KeyboardInterrupt   # as if Ctrl-C landed here


def profile_of(graph, devices: list[str], slow: float) -> Profile:
    """Op times from FLOPs, the second device `slow` times slower than the first."""
    cost = AnalyticCostModel(devices, speeds={devices[0]: 1e9, devices[1]: 1e9 / slow})
    return Profile(devices, {n: {d: cost.op_time(node, d) for d in devices} for n, node in graph.nodes.items()},
                   [TransferStat(a, b, 2e-5, 1e9) for a in devices for b in devices if a != b],
                   graph_sha256=graph.sha256)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """The fakes: the shared profile cache (one file; profiling writes the profile of equal devices
    into it), the devices (the simulator on other costs), and where Ctrl-C lands (`machine.cut`)."""
    class Machine:
        cut = Cut()
        cache = tmp_path / "shared-profile.json"

    def profiled_cost_model(graph, devices, **options):
        names = [d.name for d in devices]
        if Machine.cache.is_file():
            return ProfiledCostModel(Profile.load(Machine.cache), Machine.cache, from_cache=True)
        Machine.cut.tick("profiling")
        profile_of(graph, names, slow=1.0).save(Machine.cache)
        return ProfiledCostModel(Profile.load(Machine.cache), Machine.cache)

    class Devices(SimulatedMeasurer):
        prepared = training = None
        phase = "real"

        def measure_many(self, placements):   # one placement after the other, as the real devices do
            return [self.measure(p) for p in placements]

        def measure(self, placement):
            Machine.cut.tick(self.phase)
            return super().measure(placement)

    class Simulator(Devices):
        phase = "simulated"

    def devices_of(engine, graph, devices, protocol, **options):
        names = [d.name for d in devices]
        return Devices(graph, names, AnalyticCostModel(names, speeds={names[0]: 2e9, names[1]: 1e9}))

    monkeypatch.setattr("placer.costmodel.profile_cache.profiled_cost_model", profiled_cost_model)
    monkeypatch.setattr("placer.measure.measurer.measurer_for", devices_of)
    monkeypatch.setattr("placer.costmodel.simulator.SimulatedMeasurer", Simulator)
    monkeypatch.setattr("placer.jobs.train.paired_rewards", lambda graph, real, *rest: real)
    return Machine


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "branches.onnx"
    onnx.save(branches(4, 3), path)
    return path


def ends(run_dir) -> dict:
    """Where a run ended: its learner's state and policy, its placement and its sample counts."""
    checkpoint = torch.load(run_dir / FILENAME, weights_only=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"state": {k: checkpoint["state"][k] for k in ("samples", "history", "losses", "best", "phase")},
            "policy": {k: v.tolist() for k, v in checkpoint["policy"].items()},
            "grouping": checkpoint["grouping"], "placement": Placement.load(run_dir / "placement.json").nodes,
            "samples": summary["samples"], "by_phase": summary.get("samples_by_phase")}


HERE = ["--reward", "hybrid", "--devices", "cpu:0,cpu:1", "--space", "placement"]   # the fakes run no plans
PHASES = {   # phase -> (options, where Ctrl-C lands)
    "profiling": (HERE, ("profiling", 1)),
    "reinforce": (HERE, ("simulated", 9)),
    "real": (HERE, ("real", 4)),
    "local search": (["--cluster", "paper-4xk40", "--reward", "simulated"], None),
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_run_cut_in_any_phase_resumes_to_where_an_uncut_run_ends(phase, machine, model, tmp_path, capsys,
                                                                   monkeypatch):
    options, cut = PHASES[phase]
    train = ["train", "--graph", str(model), "--samples", "40", *QUICK, *options]
    search = importlib.import_module("placer.placers.local_search")   # the package exports the function
    whole, calls, armed = search.simulate_batch, [], []

    def counted(*args, **kwargs):   # local search's batches of moves
        calls.append(1)
        if armed and len(calls) == 5:
            armed.clear()
            raise KeyboardInterrupt   # as if Ctrl-C landed inside local search's moves
        return whole(*args, **kwargs)

    monkeypatch.setattr(search, "simulate_batch", counted)
    assert main([*train, "--run-dir", str(tmp_path / "whole")]) == 0
    batches = len(calls)
    if phase == "profiling":
        machine.cache.unlink()   # the run to cut profiles for itself
    if cut is not None:
        machine.cut = Cut(*cut)
        assert main([*train, "--run-dir", str(tmp_path / "cut")]) == 130
    else:   # Ctrl-C inside local search's moves (`counted`)
        calls.clear()
        armed.append(True)
        assert main([*train, "--run-dir", str(tmp_path / "cut")]) == 130
        assert not (tmp_path / "cut" / FILENAME).exists()   # cut before REINFORCE began
    assert f"continue with --resume --run-dir {tmp_path / 'cut'}" in capsys.readouterr().out
    if phase != "profiling":   # (a run cut while profiling has no profile yet: it takes one on resume)
        # Meanwhile another run rewrote the shared cache: the second device 8x slower
        graph = load_graph(model)
        names = json.loads((tmp_path / "whole" / "summary.json").read_text())["devices"]
        profile_of(graph, names, slow=8.0).save(machine.cache)
    calls.clear()
    assert main([*train, "--run-dir", str(tmp_path / "cut"), "--resume"]) == 0
    assert ends(tmp_path / "cut") == ends(tmp_path / "whole")
    if phase == "local search":   # it went on from where it was cut, not from the start
        assert len(calls) == batches - 4   # the four batches before the cut are not simulated again


def test_the_rewritten_cache_would_have_changed_the_run(machine, model, tmp_path):
    """What the test above guards against: a run started on the rewritten cache learns on other
    groups, so a resume that built them again would not continue the run."""
    train = ["train", "--graph", str(model), "--samples", "40", *QUICK, *PHASES["reinforce"][0]]
    assert main([*train, "--run-dir", str(tmp_path / "first")]) == 0
    graph = load_graph(model)
    names = json.loads((tmp_path / "first" / "summary.json").read_text())["devices"]
    profile_of(graph, names, slow=8.0).save(machine.cache)
    assert main([*train, "--run-dir", str(tmp_path / "second")]) == 0
    assert ends(tmp_path / "first")["grouping"] != ends(tmp_path / "second")["grouping"]


def test_ctrl_c_measures_nothing_again_and_says_how_to_go_on(machine, model, tmp_path, monkeypatch, capsys):
    """Ctrl-C ends the run at once: the closing side-by-side rounds on the real devices (a minute
    and more) are left to the resumed run, or to compare --include-rl."""
    import placer.measure.measurer as measurer_module

    opened = []

    fake_devices = measurer_module.measurer_for

    def devices_that_open(*args, **kwargs):
        real = fake_devices(*args, **kwargs)
        real.open = lambda placement: opened.append(placement)   # the closing rounds would start here
        real.run_record = lambda: {"objective": "inference"}
        return real

    monkeypatch.setattr(measurer_module, "measurer_for", devices_that_open)
    machine.cut = Cut("real", 4)
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--samples", "40", *QUICK, *PHASES["real"][0],
                 "--run-dir", str(run)]) == 130
    out = capsys.readouterr().out
    assert opened == [] and "not measured again side by side" in out and "--include-rl" in out
    assert json.loads((run / "summary.json").read_text())["interrupted"]


def test_a_second_run_into_a_folder_in_use_is_refused_in_one_line(machine, model, tmp_path, capsys):
    from placer.policy.run_lock import hold_run_folder

    run = tmp_path / "run"
    train = ["train", "--graph", str(model), "--samples", "8", *QUICK, *PHASES["reinforce"][0], "--run-dir", str(run)]
    with hold_run_folder(run, "placer train"):
        assert main(train) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"is in use by placer train (process {os.getpid()})" in err
        assert not (run / "start.pt").exists()
    assert main(train) == 0   # free again once the first run ends


def test_a_run_refused_before_it_learns_leaves_the_folder_free_for_the_corrected_command(machine, model, tmp_path,
                                                                                          monkeypatch, capsys):
    """A refusal after the run's record was written (here: no baseline fits, found once profiled)
    leaves no run behind: the same command, corrected, starts in the same folder."""
    import placer.policy.warm_start as warm_start
    from placer.errors import PlacerError

    def refused(*args, **kwargs):
        raise PlacerError("no baseline placer found a placement that fits the devices")

    run = tmp_path / "run"
    train = ["train", "--graph", str(model), "--samples", "8", *QUICK, *PHASES["reinforce"][0], "--run-dir", str(run)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(warm_start, "plan_warm_start", refused)
        assert main(train) == 2
    assert "no baseline placer" in capsys.readouterr().err
    assert not (run / "start.pt").exists() and not (run / "profile.json").exists()
    assert main(train) == 0


def test_a_run_folder_from_before_the_start_record_resumes_its_local_search_as_it_ran(tmp_path):
    """A folder made before start.pt existed: its summary's local search record gives the budget the
    search is retraced with and REINFORCE's update size, as the resume needs them."""
    from placer.policy.run_start import RunStart

    (tmp_path / "summary.json").write_text(json.dumps({"local_search_warm_start": {"budget": 300,
                                                                                   "samples_per_update": 6}}))
    start = RunStart.resume(tmp_path, {"seed": 0})
    assert start.search_progress == {"budget": 300, "state": None} and start.samples_per_update == 6
    assert RunStart.resume(tmp_path / "empty", {"seed": 0}).search_progress is None


def test_a_resume_refuses_to_profile_again(machine, model, tmp_path, capsys):
    """A resumed run learns on its own profile to the end: --refresh-profile would do nothing."""
    run = tmp_path / "run"
    train = ["train", "--graph", str(model), *QUICK, *PHASES["reinforce"][0], "--run-dir", str(run)]
    assert main([*train, "--samples", "8"]) == 0
    capsys.readouterr()
    assert main([*train, "--samples", "16", "--resume", "--refresh-profile"]) == 2
    assert "--refresh-profile does nothing on --resume" in capsys.readouterr().err
