"""The production-shaped stack: docker-compose.yml and the worker's Dockerfile are wired up.

No Docker daemon is needed: these tests read the files and check what would break a
`docker compose up` silently (unpinned images, credentials that do not match, a worker
pointed at the wrong address, an image whose wheel would miss the symlinked subpackages).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def test_services_present(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"postgresql", "temporal", "temporal-ui", "towline-worker"}


@pytest.mark.parametrize(
    ("service", "repository"),
    [
        ("postgresql", "postgres"),
        ("temporal", "temporalio/auto-setup"),
        ("temporal-ui", "temporalio/ui"),
    ],
)
def test_images_are_pinned(
    services: dict[str, dict[str, Any]], service: str, repository: str
) -> None:
    image = services[service]["image"]
    name, _, tag = image.partition(":")
    assert name == repository
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", tag), f"{service} image {image!r} is not pinned"


def test_temporal_uses_the_postgres_service(services: dict[str, dict[str, Any]]) -> None:
    postgres = _env(services["postgresql"])
    temporal = _env(services["temporal"])
    assert temporal["DB"] == "postgres12"
    assert temporal["DB_PORT"] == "5432"
    assert temporal["POSTGRES_SEEDS"] == "postgresql"
    assert temporal["POSTGRES_USER"] == postgres["POSTGRES_USER"]
    assert temporal["POSTGRES_PWD"] == postgres["POSTGRES_PASSWORD"]
    assert "postgresql" in services["temporal"]["depends_on"]
    assert "7233:7233" in services["temporal"]["ports"]


def test_ui_points_at_temporal(services: dict[str, dict[str, Any]]) -> None:
    assert _env(services["temporal-ui"])["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "8080:8080" in services["temporal-ui"]["ports"]


def test_worker_is_built_here_and_wired_to_temporal(
    services: dict[str, dict[str, Any]], dockerfile: str
) -> None:
    worker = services["towline-worker"]
    assert worker["build"] == "."
    assert "image" not in worker
    assert "temporal" in worker["depends_on"]
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
