"""Checks of a built devbuf wheel, for scripts/test-pip-install.sh and
scripts/build-manylinux.sh. Standard library and binutils' readelf only.

    wheel_check.py binaries UNPACKED DEBUG_DIR FORBIDDEN_PATH...
        every ELF file is stripped (no .debug_info), carries a GNU build-id
        and a .gnu_debuglink, has its debug file DEBUG_DIR/.build-id/xx/rest.debug
        when DEBUG_DIR is not "-", and contains none of the FORBIDDEN_PATHs
        (the build and source folders) anywhere in its bytes
    wheel_check.py metadata UNPACKED
        METADATA says License-Expression: BSD-3-Clause, the licence file is
        in the wheel, and the long description has no relative link
    wheel_check.py same DIR1 DIR2
        the two unpacked wheels hold the same files, byte for byte
    wheel_check.py same-archive WHEEL1 WHEEL2
        the two .whl files are the same bytes (one sha256); if not, which
        zip entries differ in name, order, time, attributes or content
    wheel_check.py no-file WHEEL PATTERN...
        no entry of WHEEL matches any of the regular expressions PATTERN
    wheel_check.py config DEVBUF_CONFIG PKGDIR
        devbuf-config answers each option with the right, existing folder
    wheel_check.py retag WHEEL PLATFORM OUTDIR
        a copy of WHEEL whose platform tag is PLATFORM (WHEEL's Tag lines,
        RECORD and file name): what a build for another glibc would be
        named, for scripts/build-manylinux.sh's refusal check

Each prints what is wrong, naming the file, and exits 1.
"""
import glob
import hashlib
import os
import re
import subprocess
import sys


def fail(msg):
    sys.stderr.write("wheel_check: %s\n" % msg)
    return 1


def files(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = p
    return out


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def binaries(root, debug_dir, *forbidden):
    bad = []
    elves = [p for p in files(root).values() if not os.path.islink(p) and is_elf(p)]
    if not elves:
        return fail("no ELF file in %s" % root)
    for p in sorted(elves):
        rel = os.path.relpath(p, root)
        sections = subprocess.run(["readelf", "-S", "-W", p], capture_output=True, text=True,
                                  check=True).stdout
        if ".debug_info" in sections:
            bad.append("%s: not stripped (.debug_info present)" % rel)
        if ".gnu_debuglink" not in sections:
            bad.append("%s: no .gnu_debuglink to its debug file" % rel)
        notes = subprocess.run(["readelf", "-n", p], capture_output=True, text=True,
                               check=True).stdout
        m = re.search(r"Build ID: ([0-9a-f]{2})([0-9a-f]+)", notes)
        if not m:
            bad.append("%s: no GNU build-id" % rel)
        elif debug_dir != "-":
            dbg = os.path.join(debug_dir, ".build-id", m.group(1), m.group(2) + ".debug")
            if not os.path.isfile(dbg):
                bad.append("%s: its debug file %s is missing" % (rel, dbg))
        data = open(p, "rb").read()
        for f in forbidden:
            for form in {f, os.path.realpath(f)}:
                if form.encode() in data:
                    bad.append("%s: embeds the build path %s" % (rel, form))
    for b in bad:
        sys.stderr.write("wheel_check: %s\n" % b)
    if not bad:
        print("   %d binaries: stripped, build-id, debug link%s, no build path"
              % (len(elves), ", debug files present" if debug_dir != "-" else ""))
    return 1 if bad else 0


def metadata(root):
    meta = glob.glob(os.path.join(root, "*.dist-info", "METADATA"))
    if len(meta) != 1:
        return fail("expected one *.dist-info/METADATA in %s, found %d" % (root, len(meta)))
    text = open(meta[0], encoding="utf-8").read()
    head, _, body = text.partition("\n\n")
    if "License-Expression: BSD-3-Clause" not in head.splitlines():
        return fail("%s has no 'License-Expression: BSD-3-Clause'" % meta[0])
    lic = glob.glob(os.path.join(root, "*.dist-info", "licenses", "LICENSE"))
    if not lic or "BSD 3-Clause" not in open(lic[0]).read():
        return fail("the wheel has no dist-info/licenses/LICENSE with the BSD 3-Clause text")
    # Markdown links and images whose target is not absolute (http(s), mailto).
    rel = [t for t in re.findall(r"\]\(([^)\s]+)", body)
           if not re.match(r"(https?:|mailto:)", t)]
    if rel:
        return fail("the long description has relative links, broken off the repository: %s"
                    % ", ".join(rel))
    print("   METADATA: License-Expression BSD-3-Clause, licence file, no relative link")
    return 0


def same(d1, d2):
    f1, f2 = files(d1), files(d2)
    bad = ["only in the first: %s" % k for k in sorted(set(f1) - set(f2))]
    bad += ["only in the second: %s" % k for k in sorted(set(f2) - set(f1))]
    for k in sorted(set(f1) & set(f2)):
        if open(f1[k], "rb").read() != open(f2[k], "rb").read():
            bad.append("differs: %s" % k)
    for b in bad:
        sys.stderr.write("wheel_check: %s\n" % b)
    if not bad:
        n = sum(1 for k in f1 if k.endswith(".so") or ".so." in k)
        print("   %d files identical, %d of them shared objects" % (len(f1), n))
    return 1 if bad else 0


def same_archive(w1, w2):
    import zipfile
    h1, h2 = (hashlib.sha256(open(w, "rb").read()).hexdigest() for w in (w1, w2))
    if h1 == h2:
        print("   %s: sha256 %s, the same for both builds" % (os.path.basename(w1), h1))
        return 0
    bad = ["%s and %s differ: sha256 %s vs %s" % (w1, w2, h1, h2)]
    z1, z2 = zipfile.ZipFile(w1), zipfile.ZipFile(w2)
    i1, i2 = z1.infolist(), z2.infolist()
    n1, n2 = [i.filename for i in i1], [i.filename for i in i2]
    if n1 != n2:
        bad.append("entry names or order differ" if sorted(n1) == sorted(n2)
                   else "entries differ: only in the first %s, only in the second %s"
                   % (sorted(set(n1) - set(n2))[:5], sorted(set(n2) - set(n1))[:5]))
    e2 = {i.filename: i for i in i2}
    for a in i1:
        b = e2.get(a.filename)
        if b is None:
            continue
        for field in ("date_time", "external_attr", "compress_type", "create_system", "extra", "comment"):
            if getattr(a, field) != getattr(b, field):
                bad.append("%s: %s %r vs %r" % (a.filename, field, getattr(a, field), getattr(b, field)))
        if z1.read(a) != z2.read(b):
            bad.append("%s: content differs" % a.filename)
        if len(bad) > 12:
            bad.append("...")
            break
    for b in bad:
        sys.stderr.write("wheel_check: %s\n" % b)
    return 1


def no_file(wheel, *patterns):
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    bad = [n for n in names for p in patterns if re.search(p, n)]
    for b in bad:
        sys.stderr.write("wheel_check: %s ships %s\n" % (os.path.basename(wheel), b))
    if not bad:
        print("   %s: no entry matches %s" % (os.path.basename(wheel), " ".join(patterns)))
    return 1 if bad else 0


def config(exe, pkgdir):
    pkgdir = os.path.realpath(pkgdir)
    want = {
        "--includedir": (os.path.join(pkgdir, "include"), "devbuf_capi.h"),
        "--cmakedir": (os.path.join(pkgdir, "lib", "cmake", "devbuf"), "devbufConfig.cmake"),
        "--pkgconfigdir": (os.path.join(pkgdir, "lib", "pkgconfig"), "devbuf.pc"),
        "--plugindir": (os.path.join(pkgdir, "lib", "devbuf", "plugins"), "devbuf_plugin_cpu.so"),
    }
    for opt, (path, member) in want.items():
        got = subprocess.run([exe, opt], capture_output=True, text=True)
        if got.returncode != 0:
            return fail("devbuf-config %s failed: %s" % (opt, got.stderr.strip()))
        ans = os.path.realpath(got.stdout.strip())
        if ans != path or not os.path.isfile(os.path.join(ans, member)):
            return fail("devbuf-config %s said %s; expected %s holding %s" % (opt, ans, path, member))
    out = subprocess.run([exe, "--cflags", "--version"], capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    if os.path.realpath(lines[0][2:]) != os.path.join(pkgdir, "include") or not lines[0].startswith("-I"):
        return fail("devbuf-config --cflags said %r" % lines[0])
    vpy = os.path.join(os.path.dirname(exe), "python")
    version = subprocess.run([vpy, "-c", "import devbuf; print(devbuf.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if lines[1] != version:
        return fail("devbuf-config --version said %r, devbuf.__version__ is %r" % (lines[1], version))
    m = subprocess.run([vpy, "-m", "devbuf", "--plugindir"], capture_output=True, text=True)
    if os.path.realpath(m.stdout.strip()) != want["--plugindir"][0]:
        return fail("python -m devbuf --plugindir said %r" % m.stdout)
    if subprocess.run([exe], capture_output=True).returncode != 2:
        return fail("devbuf-config with no option should print its usage and exit 2")
    print("   devbuf-config: --cflags --includedir --cmakedir --pkgconfigdir --plugindir --version ok")
    return 0


def retag(wheel, platform, outdir):
    import base64
    import hashlib
    import zipfile

    name = os.path.basename(wheel)
    stem, _, oldplat = name[:-len(".whl")].rpartition("-")
    new = os.path.join(outdir, "%s-%s.whl" % (stem, platform))
    os.makedirs(outdir, exist_ok=True)
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(new, "w", zipfile.ZIP_DEFLATED) as zout:
        names = zin.namelist()
        wheel_file = [n for n in names if n.endswith(".dist-info/WHEEL")][0]
        record = [n for n in names if n.endswith(".dist-info/RECORD")][0]
        meta = zin.read(wheel_file).decode().replace("-" + oldplat + "\n", "-" + platform + "\n")
        digest = base64.urlsafe_b64encode(hashlib.sha256(meta.encode()).digest()).rstrip(b"=").decode()
        rec = []
        for line in zin.read(record).decode().splitlines():
            if line.startswith(wheel_file + ","):
                line = "%s,sha256=%s,%d" % (wheel_file, digest, len(meta.encode()))
            rec.append(line)
        for n in names:
            data = zin.read(n)
            if n == wheel_file:
                data = meta.encode()
            elif n == record:
                data = ("\n".join(rec) + "\n").encode()
            zout.writestr(zin.getinfo(n), data)
    print(new)
    return 0


def main(argv):
    cmds = {"binaries": binaries, "metadata": metadata, "same": same, "config": config,
            "same-archive": same_archive, "no-file": no_file,
            "retag": retag}
    if not argv or argv[0] not in cmds:
        sys.stderr.write(__doc__)
        return 2
    return cmds[argv[0]](*argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
