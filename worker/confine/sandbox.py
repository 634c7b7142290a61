"""The bubblewrap sandbox every agent call and gate runs in: its worktree, nothing else."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from worker.confine import egress_relay
from worker.confine.egress import endpoint, endpoint_text, url_endpoint
from worker.confine.egress_rules import REGISTRY_ENDPOINTS, Endpoint, names_loopback
from worker.confine.limits import DEFAULT_LIMITS, ResourceLimits
from worker.exceptions import SandboxUnavailable

LOG = logging.getLogger(__name__)

# The merged-/usr links of a Debian-like system; on a system without merged /usr they are real
# folders and are bound read-only instead.
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What programs need of /etc: the dynamic linker's cache, Debian's alternatives (awk, java),
# CA certificates, name resolution and the user database. Not all of /etc: it holds the
# system git config (which could point hooks anywhere), shadow, ssh host keys, and files such
# as npmrc or pip.conf that often carry registry tokens.
ETC_ENTRIES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "pki",
    "ca-certificates",
    "ca-certificates.conf",
    "resolv.conf",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "passwd",
    "group",
    "localtime",
    "timezone",
    "mime.types",
    "os-release",
    "debian_version",
    "protocols",
    "services",
)
CHECK_TIMEOUT_S = 30.0
# Who the agent is inside its own user namespace: an ordinary uid and gid, never 0, so it holds
# no capability there either (bwrap maps them to the worker's own ids outside, so whatever it
# writes belongs to the worker, and the worktree stays writable to it and to the worker).
SANDBOX_UID = 1000
SANDBOX_GID = 1000
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`) on a Linux host or "
    "container that allows user namespaces (or run the worker as root), or set "
    "REQDRIVE_SANDBOX=off to accept running agents unconfined"
)


# Where the egress relay and the proxy's socket appear inside the sandbox, and the port the
# relay listens on there (the sandbox's own loopback: no other process shares it).
RELAY_INSIDE = Path("/run/reqdrive/egress_relay.py")
PROXY_SOCKET_INSIDE = Path("/run/reqdrive/egress.sock")
RELAY_PORT = 3128
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")
# Inside, loopback is the sandbox's own (a server the tests start): reached directly, unless
# the call's model API is on the worker's loopback, which only the proxy leads to.
SANDBOX_LOOPBACK = "localhost,127.0.0.1,::1"
# What turns a worker's sandbox off: Settings read REQDRIVE_SANDBOX (from the environment or
# `up`'s .env), whose default is on.
ENVIRONMENT_OFF = "REQDRIVE_SANDBOX=off"


class SandboxNetwork(StrEnum):
    """REQDRIVE_SANDBOX_NETWORK. Every sandbox has a network namespace of its own; its one way
    out is the egress proxy. `open`: agent calls and checks reach public addresses (never
    the worker's host, loopback, private, link-local or metadata ones) and the model's API;
    `registries`: agent calls reach their model's API and the package registries, checks the
    registries; `api`: agent calls reach only their model's API, checks nothing at all."""

    OPEN = "open"
    REGISTRIES = "registries"
    API = "api"


# What each network setting lets through, as the worker logs it at start.
NETWORK_REACHES = {
    SandboxNetwork.OPEN: "agent calls and checks: public addresses and the model's API",
    SandboxNetwork.REGISTRIES: "agent calls: the model's API and registries; checks: registries",
    SandboxNetwork.API: "agent calls: the model's API only; checks: nothing",
}


class SandboxMode(StrEnum):
    """REQDRIVE_SANDBOX: `on` confines every agent call and gate, `off` runs them bare."""

    ON = "on"
    OFF = "off"


@dataclass(frozen=True)
class Sandbox:
    """How a process is confined: bubblewrap, these paths visible, everything else absent.

    `readonly` are toolchains (a language's install, the agent CLI's folder); `writable` the
    worktree, the call's HOME and hand-over folder; `files` single read-only files (the
    prompt). The process gets exactly the environment run_process gives it; bwrap itself is
    started with none, because the sandbox's PID 1 keeps bwrap's environment.
    """

    readonly: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    # (file, where it appears): read-only files laid over a path inside a writable folder,
    # e.g. the checkout's `.git`, which the agent then cannot point elsewhere.
    shadows: tuple[tuple[Path, Path], ...] = ()
    bwrap: str = "bwrap"
    network: SandboxNetwork = SandboxNetwork.OPEN
    # REQDRIVE_SANDBOX_API_HOSTS: endpoints an agent call may reach besides its runner's API.
    more_api_hosts: tuple[Endpoint, ...] = ()
    # The endpoints this call reaches by name: the registries preset (sandbox_for), and for an
    # agent call its runner's API (`allowing`). Empty with the `api` network (a check's
    # sandbox): no proxy, no way out at all.
    api_hosts: tuple[Endpoint, ...] = ()
    # The running egress proxy's socket for this call (egress.py): the agent then runs
    # behind the relay, with HTTPS_PROXY pointing at it.
    proxy_socket: Path | None = None
    # Processes, memory and file size of every call in it (worker/confine/limits.py).
    limits: ResourceLimits = DEFAULT_LIMITS
    # The working directory bound read-only (the blind reviewer's view of a change).
    readonly_cwd: bool = False
    extra_args: tuple[str, ...] = field(default=())

    def bind(
        self,
        *,
        writable: Iterable[Path] = (),
        readonly: Iterable[Path] = (),
        shadows: Iterable[tuple[Path, Path]] = (),
    ) -> Sandbox:
        """The same sandbox with more paths visible (a call's worktree, HOME, prompt)."""
        return replace(
            self,
            writable=(*self.writable, *(Path(p) for p in writable)),
            readonly=(*self.readonly, *(Path(p) for p in readonly)),
            shadows=(*self.shadows, *shadows),
        )

    def allowing(self, api_urls: Iterable[str]) -> Sandbox:
        """The same sandbox letting an agent call reach these API base URLs' hosts."""
        added = [url_endpoint(url) for url in api_urls]
        endpoints = (*self.api_hosts, *added, *self.more_api_hosts)
        return replace(self, api_hosts=tuple(dict.fromkeys(endpoints)))

    @property
    def limits_egress(self) -> bool:
        """Whether a call in this sandbox needs the egress proxy started for it: always, but
        for a check with the `api` network, which gets no way out at all."""
        return self.network is not SandboxNetwork.API or bool(self.api_hosts)

    @property
    def reaches_public(self) -> bool:
        """Whether the proxy connects to any public address, not only to `api_hosts`."""
        return self.network is SandboxNetwork.OPEN

    def wrap(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        keep: Iterable[str] = (),
    ) -> tuple[list[str], dict[str, str]]:
        """The bwrap command line running argv in cwd with env, and bwrap's own environment.

        `keep` names variables bwrap itself carries too (a process marker, never a secret).
        """
        sandbox, argv, env = self._behind_relay(argv, env)
        args = [self.bwrap, *sandbox._namespaces(), *_system_mounts()]
        args += sandbox._call_mounts(cwd)
        # The skeleton bwrap builds (folders leading to the binds) is read-only too: a file
        # "written" beside the prompt would vanish, but the agent should not think it worked.
        args += ["--remount-ro", "/"]
        for name, value in env.items():
            args += ["--setenv", name, value]
        args += ["--chdir", str(cwd), *self.extra_args, "--", *argv]
        return args, {name: env[name] for name in keep if name in env}

    def _behind_relay(
        self, argv: Sequence[str], env: Mapping[str, str]
    ) -> tuple[Sandbox, list[str], dict[str, str]]:
        """With a proxy socket: argv started by the relay, the proxy variables pointing at it,
        and what the relay needs bound (the socket, its script, the worker's interpreter)."""
        if self.proxy_socket is None:
            return self, list(argv), dict(env)
        python = relay_python()
        relay = Path(egress_relay.__file__).resolve()
        # The interpreter's install (pyenv under /root, say) read-only; /usr is bound anyway.
        installs = [
            p for p in (Path(sys.base_prefix), python.parent) if not p.is_relative_to("/usr")
        ]
        sandbox = self.bind(
            readonly=installs,
            shadows=[(self.proxy_socket, PROXY_SOCKET_INSIDE), (relay, RELAY_INSIDE)],
        )
        proxy_url = f"http://127.0.0.1:{RELAY_PORT}"
        env = {**env, **dict.fromkeys(PROXY_VARIABLES, proxy_url)}
        for name in NO_PROXY_VARIABLES:
            env.pop(name, None)
        if not any(names_loopback(host) for host, _ in self.api_hosts):
            env.update(dict.fromkeys(NO_PROXY_VARIABLES, SANDBOX_LOOPBACK))
        relay_argv = [str(python), "-I", "-S", str(RELAY_INSIDE), str(RELAY_PORT)]
        return sandbox, [*relay_argv, str(PROXY_SOCKET_INSIDE), "--", *argv], env

    def check(self) -> None:
        """Start an empty sandbox once; SandboxUnavailable says why none can be made here."""
        if shutil.which(self.bwrap) is None:
            raise SandboxUnavailable(f"no sandbox: {self.bwrap} is not installed; {INSTALL_HINT}")
        argv, env = self.wrap(["true"], cwd=Path("/"), env={"PATH": "/usr/bin:/bin"})
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            why = f"no sandbox: bwrap failed ({error}); {INSTALL_HINT}"
            raise SandboxUnavailable(why) from None
        if done.returncode != 0:
            why = done.stderr.strip()[-500:] or f"exit code {done.returncode}"
            raise SandboxUnavailable(f"no sandbox: bwrap cannot start here ({why}); {INSTALL_HINT}")

    def _namespaces(self) -> list[str]:
        # --new-session: no TIOCSTI into a terminal; --die-with-parent and the PID namespace:
        # when the call ends, its PID 1 ends and the kernel kills everything left inside
        # (setsid, `env -i`, a double fork), whatever environment it kept.
        args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
        args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        # Never the host's network: its loopback (Redis, the worker's own services) and
        # /proc/net's view of its sockets stay outside, whatever the network setting.
        args.append("--unshare-net")
        return args

    def _call_mounts(self, cwd: Path) -> list[str]:
        """The call's own paths, parents before children so a child bind is not hidden."""
        binds = [(p, p, "--ro-bind-try") for p in self.readonly]
        binds.append((cwd, cwd, "--ro-bind" if self.readonly_cwd else "--bind"))
        binds += [(p, p, "--bind") for p in self.writable]
        binds += [(source, target, "--ro-bind") for source, target in self.shadows]
        args: list[str] = []
        seen: set[Path] = set()
        order = {"--ro-bind-try": 0, "--bind": 1, "--ro-bind": 2}
        for source, target, option in sorted(binds, key=lambda b: (len(b[1].parts), order[b[2]])):
            if target in seen:
                continue
            seen.add(target)
            args += [option, str(source), str(target)]
        return args


def relay_python() -> Path:
    """The worker's own interpreter as installed, not a virtual environment's copy or link
    (which needs its `pyvenv.cfg`, outside the binds, to find the standard library)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    installed = Path(sys.base_prefix) / "bin" / version
    return installed if installed.is_file() else Path(sys.executable).resolve()


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in USR_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_ENTRIES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # Fresh, empty and private to this sandbox: not the host's shared /tmp.
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]  # noqa: S108
    return args


def tool_paths(executable: str, path_var: str) -> list[Path]:
    """What must be visible to start `executable` from PATH: the folder it is found in, and
    where it really lives (an npm-installed CLI is a link into its package's node_modules,
    whose dependencies it needs too)."""
    found = shutil.which(executable, path=path_var)
    if found is None:
        return []
    where = Path(found).absolute()
    real = where.resolve()
    paths = [where.parent]
    modules = [p for p in real.parents if p.name == "node_modules"]
    paths.append(modules[-1] if modules else real.parent)
    return paths


def sandbox_for(
    mode: SandboxMode | str,
    readonly: Iterable[Path] = (),
    *,
    network: SandboxNetwork | str = SandboxNetwork.OPEN,
    api_hosts: Iterable[Endpoint] = (),
    limits: ResourceLimits = DEFAULT_LIMITS,
) -> Sandbox | None:
    """The sandbox a setting asks for, None for off (unchecked: make_sandbox checks)."""
    if SandboxMode(mode) is SandboxMode.OFF:
        return None
    network = SandboxNetwork(network)
    preset = REGISTRY_ENDPOINTS if network is SandboxNetwork.REGISTRIES else ()
    return Sandbox(
        readonly=tuple(Path(p) for p in readonly),
        network=network,
        more_api_hosts=tuple(api_hosts),
        api_hosts=preset,
        limits=limits,
    )


def make_sandbox(
    mode: SandboxMode | str,
    readonly: Iterable[Path] = (),
    *,
    network: SandboxNetwork | str = SandboxNetwork.OPEN,
    api_hosts: Iterable[Endpoint] = (),
    limits: ResourceLimits = DEFAULT_LIMITS,
    off_because: str = ENVIRONMENT_OFF,
) -> Sandbox | None:
    """The sandbox a setting asks for (None for off, said loudly with what set it off: see
    sandbox_choice), checked to work here."""
    sandbox = sandbox_for(mode, readonly, network=network, api_hosts=api_hosts, limits=limits)
    if sandbox is None:
        LOG.warning(
            "agents run UNCONFINED (%s): an agent can read this process's files, environment "
            "and credentials",
            off_because,
            extra={"sandbox": "off", "because": off_because},
        )
        return None
    # Found once, here at the edge, on the PATH this process started with: a call's wrap()
    # then runs this very binary, reading no environment of the worker's.
    found = shutil.which(sandbox.bwrap)
    if found is None:
        raise SandboxUnavailable(f"no sandbox: {sandbox.bwrap} is not installed; {INSTALL_HINT}")
    sandbox = replace(sandbox, bwrap=found)
    sandbox.check()
    more = [endpoint_text(e) for e in sandbox.more_api_hosts]
    reaches = NETWORK_REACHES[sandbox.network]
    extra = {"network": sandbox.network.value, "reaches": reaches, "more_api_hosts": more}
    LOG.info("sandbox network", extra=extra)
    return sandbox


def sandbox_choice(option: str | None, environment: str | None, default: str) -> tuple[str, str]:
    """The mode asked for and what asked for it, to name in a warning: the command's
    `--sandbox`, else REQDRIVE_SANDBOX, else the command's default."""
    if option:
        return option, f"--sandbox {option}"
    if environment:
        return environment, f"REQDRIVE_SANDBOX={environment}"
    return default, f"{default} by default"


def readonly_paths(value: str | None) -> list[Path]:
    """REQDRIVE_SANDBOX_READONLY: extra toolchain folders, separated like PATH."""
    return [Path(p) for p in (value or "").split(os.pathsep) if p.strip()]


def api_hosts(value: str | None) -> list[Endpoint]:
    """REQDRIVE_SANDBOX_API_HOSTS: `host:port` endpoints separated by commas or spaces;
    ValueError names the one that is not."""
    return [endpoint(item) for item in (value or "").replace(",", " ").split()]
