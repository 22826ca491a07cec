"""A channel from an installed package: a package that names its channel folder under the `nanoagent.channels`
entry-point group is one of nanoagent's channels, in `channels list`, config.json, doctor and the gateway, without a
fork. The package here is real files in tmp_path (the folder, and its `.dist-info` with `entry_points.txt`) on
`sys.path`, found by importlib.metadata as pip's install would be. Entry points are read only when asked for: never by
`--help` or a one-shot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nanoagent.channels import registry
from nanoagent.config.loader import load_config
from nanoagent.errors import ConfigError
from tests.conftest import PATIENCE, ROOT, anthropic_env, invoke, write_config

CHANNEL_SOURCE = '''
from dataclasses import dataclass, field

from nanoagent.channels.base import Chunk, DeliveryError, Question


@dataclass
class CarrierConfig:
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)
    owner: list[str] = field(default_factory=list)


class Carrier:
    name = "carrier"
    title = "Carrier"
    hint = "Carrier: plain text"
    limit = 500
    edits = False
    pairing = True
    settings_class = CarrierConfig
    env = {"token": "CARRIER_TOKEN"}

    def settings(self, config):
        return config.channels.of(self.name, CarrierConfig, self.env)

    def routes(self, settings):
        return []

    def problem(self, settings):
        return None if settings.token else "no token: set channels.carrier.token or CARRIER_TOKEN"

    def allowed(self, settings, user):
        return user in settings.allow_from

    def home(self, user):
        return None

    def split(self, markdown):
        return [Chunk(markdown, markdown)]

    def link(self, settings, paths, timing):
        raise NotImplementedError

    async def verify(self, settings):
        return "@carrierbot"

    async def deliver(self, settings, place, text, files=()):
        raise DeliveryError("nothing is carried outside a gateway")

    def questions(self):
        return [Question("token", "Carrier token", secret=True)]


CHANNEL = Carrier()
'''


def installed_package(site: Path, target: str = "nanoagent_carrier") -> Path:
    """The package `nanoagent-carrier` as pip leaves it in site-packages: its folder and its metadata."""
    (site / "nanoagent_carrier").mkdir(parents=True)
    (site / "nanoagent_carrier" / "__init__.py").write_text(CHANNEL_SOURCE, encoding="utf-8")
    info = site / "nanoagent_carrier-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nanoagent-carrier\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[nanoagent.channels]\ncarrier = {target}\n", encoding="utf-8")
    return site


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package installed on `sys.path`, the registry not having read the entry points yet."""
    made = installed_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(made))
    monkeypatch.setattr(registry, "_installed", None)
    return made


def row(listing: str, name: str) -> str:
    return next(line for line in listing.splitlines() if line.split() and line.split()[0] == name)


def test_an_installed_packages_channel_is_listed_configured_and_checked_by_doctor(site, isolated_home):
    listed = invoke("channels", "list")
    assert listed.returncode == 0, listed.stderr
    assert row(listed.stdout, "carrier").split(None, 1)[1] == "not configured (`nanoagent channels add carrier`)"
    write_config(isolated_home, {"channels": {"carrier": {"enabled": True, "token": "t"}}})
    assert row(invoke("channels", "list").stdout, "carrier").split(None, 1)[1] == \
        "enabled; no gateway is running (start `nanoagent gateway`)"
    assert "ok    carrier: the credentials work (@carrierbot)" in invoke("doctor").stdout.splitlines()


def test_config_json_naming_an_installed_channel_reads_its_block_with_the_packages_class(site, isolated_home):
    path = write_config(isolated_home, {"channels": {"carrier": {"token": "from-file", "allowFrom": ["u-1"]}}})
    assert "carrier" not in registry.names()  # nothing read the entry points yet
    config, warnings = load_config(path, env={"CARRIER_TOKEN": ""})
    settings = registry.get("carrier").settings(config)
    assert (type(settings).__name__, settings.token, settings.allow_from, warnings) == \
        ("CarrierConfig", "from-file", ["u-1"], [])
    assert "carrier" in registry.names()
    assert registry.get("carrier").settings(load_config(path, env={"CARRIER_TOKEN": "from-env"})[0]).token == "from-env"
    write_config(isolated_home, {"channels": {"carrier": {"allowFrom": "u-1"}}})
    with pytest.raises(ConfigError, match="`channels.carrier.allowFrom` must be a list"):
        load_config(path, env={})


def test_a_package_whose_channel_fails_to_load_is_one_line_naming_it(tmp_path, monkeypatch, isolated_home):
    site = installed_package(tmp_path / "site", target="nanoagent_carrier_gone")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_installed", None)
    ran = invoke("channels", "list")
    assert ran.returncode == 1
    assert ran.error_lines == ["Error: The channel 'carrier' of an installed package (nanoagent_carrier_gone) failed to "
                               "load (ModuleNotFoundError: No module named 'nanoagent_carrier_gone'); reinstall or "
                               "uninstall that package."]


# Runs the command line as `python -m nanoagent` does, and says at its exit whether the registry read the entry points.
WATCHED = ("import atexit, runpy, sys\n"
           "def said():\n"
           "    registry = sys.modules.get('nanoagent.channels.registry')\n"
           "    read = registry is not None and registry._installed is not None\n"
           "    sys.stderr.write(f'entry points read: {read}\\n')\n"
           "atexit.register(said)\n"
           "sys.argv[0] = 'nanoagent'\n"
           "runpy.run_module('nanoagent', run_name='__main__', alter_sys=True)\n")


@pytest.mark.process
def test_help_and_a_one_shot_read_no_entry_points_nor_channel_folders_and_channels_list_does(site, llm,
                                                                                             isolated_home):
    from tests.llm_server import Reply

    env = {**os.environ, **anthropic_env(llm), "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-X", "importtime", "-c", WATCHED, *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=PATIENCE, stdin=subprocess.DEVNULL)

    def folders_imported(ran: subprocess.CompletedProcess[str]) -> list[str]:
        imported = {line.split("|")[-1].strip() for line in ran.stderr.splitlines() if "import time:" in line}
        return sorted(name for name in imported if name.split(".")[:2] == ["nanoagent", "channels"]
                      and len(name.split(".")) > 2 and name.split(".")[2] in registry.names())

    helped = run("--help")
    assert helped.returncode == 0 and "entry points read: False" in helped.stderr, helped.stderr[-2000:]
    llm.script(Reply(text="hello"))
    answered = run("agent", "-m", "hi")
    assert (answered.returncode, answered.stdout) == (0, "hello\n"), answered.stderr[-2000:]
    assert "entry points read: False" in answered.stderr
    assert folders_imported(helped) == folders_imported(answered) == []  # no channel's folder either
    listed = run("channels", "list")
    assert listed.returncode == 0 and "entry points read: True" in listed.stderr, listed.stderr[-2000:]
    assert row(listed.stdout, "carrier")
