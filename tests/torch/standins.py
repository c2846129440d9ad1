#!/usr/bin/env python3
"""Builds the stand-ins for every NVIDIA library the torch package links, so that the unmodified
`torch` wheel imports, and trains, on the simulated GPU (REFERENCE.md section 12).

    standins.py TORCH_LIB SIM_DIR CU13_INCLUDE OUT [SIM_OUT]

TORCH_LIB is the wheel's torch/lib, SIM_DIR the repository's tests/sim, CU13_INCLUDE NVIDIA's
CUDA 13 headers (nvidia/cu13/include), OUT the folder the libraries are written to.

What each library must export is read from the wheel itself: every undefined dynamic symbol of
torch/lib/*.so, with the version tag its import carries (`cudaMalloc@libcudart.so.13`), goes to
the library that tag names; an import without a tag goes to the library its prefix names
(`nccl*` -> libnccl.so.2). For each library this writes one weak definition per name (a function
returning 0, the libraries' common success code, or an 8-byte zeroed object) and a version script
putting them under that tag, then links them with the hand-written behaviour in SIM_DIR, whose
strong definitions win: libcudart.so.13 is the simulated runtime (cudart_sim.c, cudart13.c,
cudart_torch.c), the others take what torch needs of them from nvidia_libs.c (handles, versions,
NCCL's communicators). A weak stub whose name says it creates a handle (`cublasCreate_v2`,
`cudnnCreateTensorDescriptor`, ...) writes a fresh non-null handle to its first argument, as the
real ones do: torch checks them.

The simulated driver and NVML are copied beside them from SIM_OUT (the build's sim/) when given (the
runtime dlopens libcuda.so.1 through its $ORIGIN run path).
"""

import os
import re
import shutil
import subprocess
import sys

# soname -> (version tag of its imports or None, prefixes of untagged imports, hand-written sources)
LIBRARIES = {
    "libcudart.so.13": ("libcudart.so.13", (), ("cudart_sim.c", "cudart13.c", "cudart_torch.c")),
    "libcublas.so.13": ("libcublas.so.13", (), ("nvidia_libs.c",)),
    "libcublasLt.so.13": ("libcublasLt.so.13", (), ("nvidia_libs.c",)),
    "libcudnn.so.9": ("libcudnn.so.9", (), ("nvidia_libs.c",)),
    "libcufft.so.12": ("libcufft.so.12", (), ("nvidia_libs.c",)),
    "libcupti.so.13": ("libcupti.so.13", (), ("nvidia_libs.c",)),
    "libcusolver.so.12": ("libcusolver.so.12", (), ("nvidia_libs.c",)),
    "libcusparse.so.12": ("libcusparse.so.12", (), ("nvidia_libs.c",)),
    "libnvrtc.so.13": ("libnvrtc.so.13", (), ("nvidia_libs.c",)),
    "libnvshmem_host.so.3": ("NVSHMEM", ("nvshmem",), ("nvidia_libs.c",)),
    "libcufile.so.0": (None, ("cuFile",), ("nvidia_libs.c",)),
    "libcusparseLt.so.0": (None, ("cusparseLt",), ("nvidia_libs.c",)),
    "libnccl.so.2": (None, ("nccl",), ("nvidia_libs.c",)),
}

# Prefixes whose `...Create...` functions hand back a pointer-sized handle in their first argument.
HANDLE_PREFIXES = ("cublas", "cudnn", "cusparse", "cusolver")

IMPORT = re.compile(r"^\s*\d+:\s+[0-9a-f]+\s+\d+\s+(\w+)\s+(\w+)\s+\w+\s+UND\s+([^\s@]+)(?:@(\S+))?")


def imports(torch_lib):
    """{(name, tag or None): 'FUNC'|'OBJECT'|'NOTYPE'} over every torch/lib/*.so."""
    found = {}
    for f in sorted(os.listdir(torch_lib)):
        if not f.endswith(".so"):
            continue
        out = subprocess.run(
            ["readelf", "--dyn-syms", "-W", os.path.join(torch_lib, f)],
            check=True, capture_output=True, text=True,
        ).stdout
        for line in out.splitlines():
            m = IMPORT.match(line)
            if m:
                kind, _bind, name, tag = m.groups()
                found.setdefault((name, tag), kind)
    return found


def owner(name, tag):
    """The stand-in library an import belongs to, or None (not an NVIDIA library's)."""
    for soname, (want_tag, prefixes, _) in LIBRARIES.items():
        if tag is not None and tag == want_tag:
            return soname
        if tag is None and any(name.startswith(p) for p in prefixes):
            return soname
    return None


def stub(name, kind):
    if kind == "OBJECT":
        return f"__attribute__((weak)) unsigned long long {name} = 0;\n"
    if "Create" in name and name.startswith(HANDLE_PREFIXES):
        return (f"__attribute__((weak)) int {name}(void **handle)\n"
                f"{{ if (handle) *handle = standin_handle(); return 0; }}\n")
    return f"__attribute__((weak)) int {name}(void) {{ return 0; }}\n"


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{what} failed:\n{r.stderr}")


def main():
    torch_lib, sim, cu13, out = sys.argv[1:5]
    sim_out = sys.argv[5] if len(sys.argv) > 5 else None
    os.makedirs(out, exist_ok=True)
    per_lib = {soname: {} for soname in LIBRARIES}
    for (name, tag), kind in imports(torch_lib).items():
        soname = owner(name, tag)
        if soname:
            per_lib[soname][name] = kind
    for soname, names in per_lib.items():
        tag, _, sources = LIBRARIES[soname]
        base = os.path.join(out, soname)
        with open(base + ".stubs.c", "w") as c:
            c.write(f"/* Generated by tests/torch/standins.py: what torch imports of {soname}. */\n")
            c.write("static unsigned long standin_next = 0x5a000;\n"
                    "static void *standin_handle(void)\n"
                    "{ return (void *)__atomic_add_fetch(&standin_next, 16, __ATOMIC_RELAXED); }\n")
            for name in sorted(names):
                c.write(stub(name, names[name]))
        node = tag or soname
        exported = sorted(names)
        if soname == "libcudart.so.13":
            exported = ["cuda*", "__cuda*"]  # everything the simulated runtime defines
        with open(base + ".map", "w") as m:
            m.write(f"{node} {{\n    global:\n")
            for n in exported:
                m.write(f"        {n};\n")
            m.write("    local:\n        *;\n};\n")
        objects = [base + ".stubs.c"]
        for source in sources:
            # The runtime's own part keeps the repository's headers; the rest sees NVIDIA's.
            include = os.path.join(sim, "include") if source == "cudart_sim.c" else cu13
            obj = os.path.join(out, f"{soname}.{source}.o")
            run(["cc", "-c", "-fPIC", "-O1", "-g", "-I", include, "-DSIM_VERSION=13020",
                 "-o", obj, os.path.join(sim, source)], f"compiling {source} for {soname}")
            objects.append(obj)
        run(["cc", "-shared", "-o", base, f"-Wl,-soname,{soname}",
             f"-Wl,--version-script={base}.map", "-Wl,-rpath,$ORIGIN"] + objects + ["-ldl", "-lpthread"],
            f"linking {soname}")
    if sim_out:
        for lib in ("libcuda.so.1", "libnvidia-ml.so.1"):
            shutil.copy(os.path.join(sim_out, lib), os.path.join(out, lib))


if __name__ == "__main__":
    main()
