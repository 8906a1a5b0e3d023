"""`harness doctor --install` installs the tools' Debian packages without starting or
enabling their services (on a systemd host it left a system nginx on
0.0.0.0:80 and a system memcached running). The commands are recorded, not run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness import doctor

REAL_RUN = subprocess.run  # the fixture replaces subprocess.run everywhere


class FakeHost:
    """apt-get and systemctl as a Debian postinst would drive them: the install enables
    nginx.service and starts it unless policy-rc.d forbids it (exit 101)."""

    def __init__(self, root: Path) -> None:
        self.policy = root / "usr/sbin/policy-rc.d"
        self.policy.parent.mkdir(parents=True)
        self.units = root / "etc/systemd/system"
        (self.units / "multi-user.target.wants").mkdir(parents=True)
        (self.units / "multi-user.target.wants/ssh.service").symlink_to("/lib/ssh.service")
        self.calls: list[list[str]] = []
        self.started: list[str] = []

    def run(self, command: list[str], **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(command))
        if command[:2] == ["apt-get", "install"]:
            wants = self.units / "multi-user.target.wants"
            (wants / "nginx.service").symlink_to("/lib/systemd/system/nginx.service")
            policy = REAL_RUN([str(self.policy)]) if self.policy.exists() else None
            if policy is None or policy.returncode != 101:
                self.started.append("nginx.service")
        if command[1:2] == ["disable"]:
            for unit in command[3:]:
                (self.units / "multi-user.target.wants" / unit).unlink()
        return subprocess.CompletedProcess(command, 0, "", "")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    fake = FakeHost(tmp_path)
    monkeypatch.setattr(doctor, "POLICY_RC_D", fake.policy, raising=False)
    monkeypatch.setattr(doctor, "SYSTEMD_UNIT_DIR", fake.units, raising=False)
    monkeypatch.setattr(doctor.subprocess, "run", fake.run)
    monkeypatch.setattr(doctor, "tool_path", lambda _name: None)
    monkeypatch.setattr(doctor.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 0)
    return fake


def test_install_neither_starts_nor_enables_the_services(host: FakeHost) -> None:
    installed = doctor._install_packages(["nginx", "memcached"])
    assert set(installed) >= {"nginx", "memcached"}
    assert host.started == []  # policy-rc.d said 101 while apt-get ran
    assert not host.policy.exists()  # and is gone afterwards
    assert ["/usr/bin/systemctl", "disable", "--quiet", "nginx.service"] in host.calls
    wants = sorted(p.name for p in (host.units / "multi-user.target.wants").iterdir())
    assert wants == ["ssh.service"]  # what was enabled before stays enabled


def test_tools_built_with_cargo_are_not_asked_of_apt_get(host: FakeHost) -> None:
    installed = doctor._install_packages(None)  # every tool missing
    assert "wrk" in installed
    assert not [p for p in installed if p.startswith("cargo:")]  # oha: doctor.install_crate
    [apt_install] = [call for call in host.calls if call[:2] == ["apt-get", "install"]]
    assert not [word for word in apt_install if "oha" in word]


def test_an_existing_policy_rc_d_is_left_as_it_is(host: FakeHost) -> None:
    host.policy.write_text("#!/bin/sh\n# the administrator's\nexit 101\n")
    host.policy.chmod(0o755)
    doctor._install_packages(["nginx"])
    assert host.policy.read_text() == "#!/bin/sh\n# the administrator's\nexit 101\n"
    assert os.access(host.policy, os.X_OK)
    assert host.started == []


def test_postgresql_is_installed_with_the_rest_and_its_cluster_not_started(
    host: FakeHost,
) -> None:
    """FerretDB's backend: Debian's `postgresql`, under the same no-start policy."""
    installed = doctor._install_packages(None)
    assert "postgresql" in installed
    [install] = [call for call in host.calls if call[:2] == ["apt-get", "install"]]
    assert "postgresql" in install
    assert host.started == []
    assert not host.policy.exists()
