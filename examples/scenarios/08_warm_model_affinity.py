"""Warm-model affinity

Loading a model's weights onto a GPU takes minutes, so a GPU worker prefers the jobs of the
model it already holds. Here box-a's GPU worker is busy with a llama job when a whisper job
and then another llama job arrive. When it finishes, it takes the newer llama job first,
while llama is still warm, and only then swaps to whisper: one load per model instead of
three. The loaders are fakes that move the fake nvidia-smi's used memory as a real load would.
"""

from __future__ import annotations

import os
import sys

import _scenario

TASKS = '''\
import os
import time

import rowfleet

SIZES = {"llama3-8b:q4": 9000, "whisper-large": 7000}  # MiB each takes on the GPU


def _log(name, line):
    with open(name, "a") as log:
        log.write(line + "\\n")


def _use(delta):
    """Move the fake GPU's used memory, as the fake nvidia-smi prints it."""
    path = os.environ["FAKE_NVIDIA_SMI_FILE"]
    used = int(open(path).read().split(",")[4]) + delta
    with open(path + ".tmp", "w") as handle:
        handle.write(f"0, GPU-fake-0, Fake GPU, 50, {used}, 24000\\n")
    os.replace(path + ".tmp", path)


def _register(model):
    def load():
        _log("models.log", f"load {model}")
        _use(SIZES[model])
        return model

    def unload(obj):
        _log("models.log", f"unload {model}")
        _use(-SIZES[model])

    rowfleet.model(model, unload=unload)(load)


for _model in SIZES:
    _register(_model)


@rowfleet.task(queue="gpu")
def infer(tag, gate=None):
    rowfleet.model()  # the job's model, loaded only if this process does not hold it
    give_up = time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < give_up:
        time.sleep(0.01)
    _log("runs.log", f"{tag} on {rowfleet.current_job().required_model}")
'''
WORKER = ("worker", "--host", "box-a", "--queue", "gpu", "--app", "tasks", "--gpu", "--poll", "0.2",
          "--heartbeat", "0.5", "--renew", "0.5", "--lease", "30")


def enqueue(s: _scenario.Scenario, tag: str, model: str, gate: str = "") -> int:
    args = f'{{"tag": "{tag}", "gate": "{gate}"}}' if gate else f'{{"tag": "{tag}"}}'
    return int(s.rowfleet("enqueue", "tasks:infer", "--app", "tasks", "--model", model, "--args", args))


def warm_on(s: _scenario.Scenario, model: str) -> bool:
    return any((row["gpu"] or {}).get("warm_model") == model for row in s.json("workers")["workers"])


def scenario(s: _scenario.Scenario) -> None:
    s.write("tasks.py", TASKS)
    s.out("$ mkdir bin && ln -s <repo>/tests/fixtures/bin/nvidia-smi bin/nvidia-smi")
    s.path("bin").mkdir()
    os.symlink(_scenario.FAKE_NVIDIA_SMI, s.path("bin") / "nvidia-smi")
    s.write("gpu.csv", "0, GPU-fake-0, Fake GPU, 50, 1000, 24000\n", show=False)
    s.out('$ echo "0, GPU-fake-0, Fake GPU, 50, 1000, 24000" > gpu.csv    # what the fake GPU reports')
    s.out('$ export PATH="$PWD/bin:$PATH" FAKE_NVIDIA_SMI_FILE=gpu.csv')
    env = s.env(PATH=os.pathsep.join([str(s.path("bin")), os.environ.get("PATH", "")]),
                FAKE_NVIDIA_SMI_FILE=str(s.path("gpu.csv")))
    s.rowfleet("init", show=False)
    first = enqueue(s, "summary-1", "llama3-8b:q4", gate="go")
    s.spawn("box-a", *WORKER, env=env)
    s.wait_job(first, "running")
    s.wait_for(lambda: warm_on(s, "llama3-8b:q4"), "box-a to advertise llama3-8b:q4 as warm")
    s.note("box-a holds llama3-8b:q4 and is busy; a whisper job arrives, then another llama job")
    other = enqueue(s, "transcript-1", "whisper-large")
    newer = enqueue(s, "summary-2", "llama3-8b:q4")
    s.out("$ touch go    # summary-1 finishes")
    s.path("go").touch()
    s.wait_job(other, "completed")
    s.out("$ cat runs.log")
    s.out(s.path("runs.log").read_text())
    s.out("$ cat models.log")
    s.out(s.path("models.log").read_text())
    s.check([line.split()[0] for line in s.path("runs.log").read_text().splitlines()]
            == ["summary-1", "summary-2", "transcript-1"],
            f"run order: {s.path('runs.log').read_text()!r}")
    s.check(s.path("models.log").read_text().split() == ["load", "llama3-8b:q4", "unload", "llama3-8b:q4",
                                                       "load", "whisper-large"],
            f"loads: {s.path('models.log').read_text()!r}")
    s.check(s.job(newer)["warm_claim"], f"job {newer} was not a warm claim")
    s.note(f"job {newer} jumped the older whisper job {other} because its model was warm: two loads, not three")
    s.stop("box-a")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
