"""The pure rules of issue 48 (core/families/cuda/host.py and reach.py): which files are the
driver's, the driver version in its texts, the loader's search order and the verdicts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.families.cuda.host import (
    LAYOUTS,
    HostDriver,
    home_manager_block,
    is_driver_library,
    link_commands,
    tmpfiles_rules,
    version_of_name,
    version_of_nvrm,
)
from capplan.core.families.cuda.reach import Finding, LoaderFacts, Place, judge, search_places

HOST_RUNTIME = ["libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libgomp.so.1",
                "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libpthread.so.0", "libz.so.1",
                "libdl.so.2", "librt.so.1"]  # fmt: skip
DEBIAN = next(x for x in LAYOUTS if x.key == "debian")
WSL = next(x for x in LAYOUTS if x.key == "wsl2")
NIX_LD = "/nix/store/00000000000000000000000000000000-glibc-2.40-66/lib/ld-linux-x86-64.so.2"


@pytest.mark.parametrize("name", HOST_RUNTIME)
@pytest.mark.parametrize("dedicated", [False, True])
def test_the_host_runtime_is_never_the_driver(name: str, dedicated: bool) -> None:
    assert not is_driver_library(name, dedicated=dedicated)


@pytest.mark.parametrize(
    "name",
    ["libcuda.so.1", "libcuda.so.550.54.14", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1",
     "libnvidia-gpucomp.so.570.124.06", "libnvcuvid.so.1", "libEGL_nvidia.so.0", "libnvrm_gpu.so",
     "libdxcore.so"],
)  # fmt: skip
def test_driver_libraries_by_name(name: str) -> None:
    assert is_driver_library(name, dedicated=False)


def test_a_dedicated_folder_takes_any_library_a_shared_one_only_the_drivers() -> None:
    assert is_driver_library("libnvdla_runtime.so", dedicated=True)
    assert not is_driver_library("libssl.so.3", dedicated=False)
    assert not is_driver_library("nvidia-smi", dedicated=True)


@given(st.text(max_size=60))
def test_a_linked_name_is_a_plain_library_name(name: str) -> None:
    # Whatever a folder holds: what is linked (and written into tmpfiles rules) is a plain name.
    if is_driver_library(name, dedicated=True):
        assert re.fullmatch(r"lib[A-Za-z0-9_+-]*\.so(\.[0-9A-Za-z_.]+)?", name)


def test_versions() -> None:
    assert version_of_name("libcuda.so.550.54.14") == "550.54.14"
    assert version_of_name("libcuda.so.1") is None
    assert version_of_name("libcuda.so.1.1") is None  # WSL2's and JetPack's
    assert (
        version_of_nvrm(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Thu Feb 20 ...\nGCC version: gcc version 12\n"
        )
        == "570.124.06"
    )
    assert version_of_nvrm("NVRM version: garbage\n") is None


def _facts(interp: str | None = NIX_LD, **kw: object) -> LoaderFacts:
    base: dict[str, object] = dict(path="p", folder="/opt/app/bin", interp=interp, rpath=(),
                                   runpath=("/run/opengl-driver/lib",), needed=(), soname=None,
                                   in_store=False, static_runtime=False)  # fmt: skip
    base.update(kw)
    return LoaderFacts(**base)  # type: ignore[arg-type]


def test_search_order_and_origin() -> None:
    facts = _facts(rpath=("$ORIGIN/../lib", "/usr/lib/x86_64-linux-gnu"), runpath=())
    places = search_places(facts, "/a::relative:/b", ["/usr/lib64"])
    assert [(p.how, p.folder, p.host) for p in places] == [
        ("RPATH", "/opt/app/bin/../lib", False),
        ("RPATH", "/usr/lib/x86_64-linux-gnu", True),
        ("LD_LIBRARY_PATH", "/a", False),
        ("LD_LIBRARY_PATH", "/b", False),
    ]
    # DT_RPATH is ignored when there is a RUNPATH, which comes after LD_LIBRARY_PATH; the
    # cache only for the host's glibc.
    facts = _facts(interp="/lib64/ld-linux-x86-64.so.2", rpath=("/x",))
    assert [p.how for p in search_places(facts, "/a", ["/usr/lib64"])] == [
        "LD_LIBRARY_PATH", "RUNPATH", "ld.so.cache"]  # fmt: skip


def test_nix_built_and_needs_driver() -> None:
    assert _facts(interp=None).nix_built and _facts().needs_driver
    host = _facts(interp="/lib64/ld-linux-x86-64.so.2", runpath=("$ORIGIN",))
    assert not host.nix_built and not host.needs_driver
    assert _facts(runpath=(), soname="libcudart.so.12", in_store=True).needs_driver


def test_verdicts() -> None:
    facts = _facts()
    link = Place("/run/opengl-driver/lib", "RUNPATH", True)
    lib = Place("/lib/x", "LD_LIBRARY_PATH", False)
    absent = judge(facts, [link], {link: Finding("absent", "missing on this host")}, "550.54.14")
    assert not absent.ok and "missing on this host" in absent.reason
    found = judge(facts, [link], {link: Finding("found", version="550.54.14")}, "550.54.14")
    assert (found.ok, found.how) == (True, "RUNPATH")
    stale = judge(facts, [link], {link: Finding("found", version="535.1.1")}, "550.54.14")
    assert not stale.ok and "error 803" in stale.reason
    libc = judge(facts, [lib, link], {lib: Finding("absent", libc=True),
                                      link: Finding("found")}, None)  # fmt: skip
    assert not libc.ok and "libc.so.6" in libc.reason
    skipped = judge(facts, [lib, link], {lib: Finding("broken", "not an ELF file"),
                                         link: Finding("found")}, None)  # fmt: skip
    assert skipped.ok and skipped.found == "/run/opengl-driver/lib"
    jetson = judge(facts, [link], {link: Finding("found", nvrm_missing=("libnvrm_mem.so",))}, None)
    assert not jetson.ok and "libnvrm_mem.so" in jetson.reason


def _driver(layout: object, version: str | None) -> HostDriver:
    return HostDriver(layout, version, None, "/x/libcuda.so.1", "x86_64",  # type: ignore[arg-type]
                      ("libcuda.so.1", "libnvidia-ml.so.1"))  # fmt: skip


def test_pasted_rules() -> None:
    shared = _driver(DEBIAN, "550.54.14")
    assert tmpfiles_rules(shared).splitlines()[2:] == [
        "L+ /run/opengl-driver/lib/libcuda.so.1 - - - - /usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "L+ /run/opengl-driver/lib/libnvidia-ml.so.1 - - - - "
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    ]
    assert "ln -sfn /usr/lib/wsl/lib /run/opengl-driver/lib" in link_commands(_driver(WSL, None))
    block, then = home_manager_block(_driver(DEBIAN, "550.54"))
    assert 'version = "550.54";' in block and "accepts versions like 550.163.01 only" in then
    block, _ = home_manager_block(_driver(WSL, None))
    assert "/usr/lib/wsl/lib\\${LD_LIBRARY_PATH" in block
