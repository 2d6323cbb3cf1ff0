"""The launcher every runner starts inside its sandbox: it sets the program's rlimits and starts the interpreter, and
(bubblewrap) sends back the files the program left in the output directory once it exits.

A launcher rather than `preexec_fn`, which is unsafe in a process with threads (the gateway's event loop and workers).
With a files pipe it stays the program's parent and writes each offered file to the pipe as a JSON header line
followed by its bytes (a header alone for a file it does not send: not a regular file, too large, one too many);
without one (`-1`, the Modal runner, which reads files through Modal's file system API) it becomes the program.
"""

from __future__ import annotations

from functions.sandbox.protocol import OUTPUT_DIR, SandboxLimits

_PROGRAM = """\
import json, os, resource, stat, sys
cpu, memory, fsize, nproc, out_fd, out_files, out_file_bytes = map(int, sys.argv[1:8])
output_dir, program = sys.argv[8], sys.argv[9]
pid = os.fork() if out_fd >= 0 else 0
if pid == 0:
    if out_fd >= 0:
        os.close(out_fd)
    for limit, value in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, memory << 20), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_FSIZE, fsize << 20), (resource.RLIMIT_NPROC, nproc)):
        resource.setrlimit(limit, (value, value))
    os.execv(sys.executable, [sys.executable, '-I', program])
status = os.waitpid(pid, 0)[1]
with os.fdopen(out_fd, 'wb') as out:
    sent = 0
    for name in sorted(os.listdir(output_dir)):
        path = os.path.join(output_dir, name)
        info = os.lstat(path)
        header = {'name': name, 'size': info.st_size, 'regular': stat.S_ISREG(info.st_mode)}
        send = header['regular'] and info.st_size <= out_file_bytes and sent < out_files
        out.write(json.dumps({**header, 'sent': send}).encode() + b'\\n')
        if send:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            out.write(os.read(fd, info.st_size).ljust(info.st_size, b'\\0'))
            os.close(fd)
            sent += 1
code = os.waitstatus_to_exitcode(status)
os._exit(code if code >= 0 else 128 - code)
"""


def launch_command(python: str, program: str, limits: SandboxLimits, *, files_fd: int = -1) -> list[str]:
    """The command that runs `program` (a path inside the sandbox) with `python` under `limits`' rlimits."""
    cpu_s = int(limits.timeout_s) + 1
    numbers = (cpu_s, limits.memory_mb, limits.file_size_mb, limits.max_processes, files_fd, limits.out_files,
               limits.out_file_mb << 20)  # fmt: skip
    return [python, "-I", "-c", _PROGRAM, *map(str, numbers), OUTPUT_DIR, program]
