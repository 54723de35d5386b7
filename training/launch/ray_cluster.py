"""A Ray cluster as a launcher sees it from outside: does one answer at a dashboard address, and does it
declare the resources a run will ask for?

verl's PPO trainer asks Ray for one placement group per node, each of `n_gpus_per_node` bundles
{CPU: 1, GPU: 1} (in CPU mode {CPU: 1, cpu: 1}: a custom resource named `cpu`), after checking that the
cluster has enough `GPU`s in total (in CPU mode too), plus one CPU for its TaskRunner. A cluster that lacks
them fails inside verl half a minute after the job was submitted; this module reads the cluster's declared
resources from the dashboard's state API (GET /api/v0/nodes) first, so that the launcher can refuse the run
with the `ray start` command that fixes it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from training.launch.recipe import LaunchError, StartAgain

PROBE_TIMEOUT_S = 3
# An address the user named is waited on longer: a busy dashboard is not a missing cluster.
GIVEN_ADDRESS_PROBE_TIMEOUT_S = 30
# A dashboard answers before its head node is registered (over a minute later on a busy 2-core machine): an
# empty node list is waited out.
REGISTRATION_WAIT_S = 120
# ray.init(address="local") raises this when its new node's raylet did not register with its GCS within Ray's fixed
# 30 s (ray/_private/node.py): on a busy machine, before anything of the run started (the raylet also stops when its
# dashboard agent has not started within 15 s).
LOCAL_START_AGAIN = StartAgain(
    marker="The current node timed out during startup",
    cause="Ray's new local node did not register within Ray's fixed 30 s (a busy machine)",
    starts=3,
)
CPU_MODE_RESOURCE = "cpu"  # what verl's placement groups ask for instead of GPU in CPU mode
TASK_RUNNER_CPUS = 1


def auth_token() -> str | None:
    """The token a Ray 2.60 cluster with token authentication expects, found where Ray's own CLI looks."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    if token:
        return token
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    return path.read_text().strip() if path.is_file() else None


def job_cli_env() -> dict[str, str]:
    """The environment `ray job submit` needs: Ray's job CLI sends the token only when told to (Ray 2.60)."""
    if "RAY_AUTH_MODE" not in os.environ and auth_token():
        return {"RAY_AUTH_MODE": "token"}
    return {}


def cluster_answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a Ray dashboard answers at `address` within `timeout_s`; any HTTP answer counts (401 too: token
    authentication)."""
    try:
        urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def declared_resources(address: str) -> list[dict[str, float]]:
    """Each live node's declared resources (`ray start --num-gpus ... --resources ...`), from the dashboard."""
    token = auth_token()
    request = urllib.request.Request(
        f"{address.rstrip('/')}/api/v0/nodes?detail=1",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    deadline = time.monotonic() + REGISTRATION_WAIT_S
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                nodes = json.load(response)["data"]["result"]["result"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise LaunchError(
                f"the Ray cluster at {address} did not list its nodes (GET /api/v0/nodes): {err}"
            ) from err
        alive = [node["resources_total"] for node in nodes if node.get("state") == "ALIVE"]
        if alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


@dataclass(frozen=True)
class ResourceRequest:
    """What a run asks of a Ray cluster: `nnodes` nodes with `gpus_per_node` GPUs (logical ones in CPU mode)."""

    nnodes: int
    gpus_per_node: int
    cpu_mode: bool

    def per_node(self) -> dict[str, float]:
        needed = {"GPU": self.gpus_per_node, "CPU": self.gpus_per_node}
        if self.cpu_mode:
            needed[CPU_MODE_RESOURCE] = self.gpus_per_node
        return needed

    def describe(self) -> str:
        per_node = ", ".join(f"{count:g} {name}" for name, count in self.per_node().items())
        return f"{self.nnodes} node(s) with {per_node} each, and {TASK_RUNNER_CPUS} more CPU for verl's TaskRunner"

    def start_command(self) -> str:
        """A `ray start` that declares what this run needs on one node (every node of a multi-node run)."""
        cpus = self.gpus_per_node + TASK_RUNNER_CPUS + 2  # the placement group, the TaskRunner, headroom
        if self.cpu_mode:
            resources = json.dumps({CPU_MODE_RESOURCE: self.gpus_per_node})
            return (
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --dashboard-host=127.0.0.1 "
                f"--num-cpus={cpus} --num-gpus={self.gpus_per_node} --resources='{resources}'"
            )
        return f"ray start --head --num-gpus={self.gpus_per_node} (on a machine with {self.gpus_per_node} GPUs)"


def shortfall(request: ResourceRequest, nodes: list[dict[str, float]]) -> str | None:
    """What the cluster lacks for `request`, in words; None when it declares enough."""
    per_node = request.per_node()
    fitting = [node for node in nodes if all(node.get(name, 0) >= count for name, count in per_node.items())]
    total_cpus = sum(node.get("CPU", 0) for node in nodes)
    needed_cpus = request.nnodes * request.gpus_per_node + TASK_RUNNER_CPUS
    if len(fitting) >= request.nnodes and total_cpus >= needed_cpus:
        return None
    declared = "; ".join(", ".join(f"{name} {node.get(name, 0):g}" for name in per_node) for node in nodes)
    declared = declared or f"no live node (none registered within {REGISTRATION_WAIT_S} s)"
    return f"the run needs {request.describe()}; the cluster's nodes declare: {declared}"


def require_resources(address: str, request: ResourceRequest) -> None:
    """Refuses a submission the cluster at `address` cannot place, naming the `ray start` that would fix it."""
    missing = shortfall(request, declared_resources(address))
    if missing:
        raise LaunchError(
            f"the Ray cluster at {address} cannot run this job: {missing}. Start one that declares it (ray stop "
            f"first): {request.start_command()}"
        )
