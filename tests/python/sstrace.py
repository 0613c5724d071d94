"""A minimal reader of stallscope trace files (common/trace_format.h,
docs/trace-format.md), enough for the Python call-site tests to check what
the recorder wrote independently of the analyzer: API records, the API
table, strings and stacks (Python stacks as (file, function, line) frames,
innermost first)."""
import glob
import os
import struct

FILE_HEADER = 96
CHUNK = struct.Struct("<IHHIIII")  # magic, type, reserved, tid, count, payload_bytes, checksum
CHUNK_MAGIC = 0x4B4E4843
API = struct.Struct("<QQQQQQIHHiI")  # ApiRecord, 64 bytes
assert API.size == 64
K_API, K_STRING, K_STACK, K_API_TABLE, K_NVTX = 1, 5, 6, 9, 4
STACK_NATIVE, STACK_PYTHON = 1, 2
RECORD_PYTHON_STACK = 1


def pad8(n):
    return (n + 7) & ~7


class ApiCall:
    __slots__ = ("tid", "enter", "exit", "api", "name", "flags", "result", "stack", "python_stack")


class Trace:
    def __init__(self, path):
        self.path = path
        self.api_names = {}
        self.strings = {}
        self.native_stacks = {}
        self.python_stacks = {}  # id -> [(string id, line)], innermost first
        self.calls = []
        self.nvtx_types = []
        with open(path, "rb") as f:
            data = f.read()
        if data[:8] != b"STLSCOPE":
            raise ValueError(f"{path}: not a stallscope trace")
        off = struct.unpack_from("<I", data, 12)[0] or FILE_HEADER
        self.pid = struct.unpack_from("<I", data, 16)[0]
        while off + CHUNK.size <= len(data):
            magic, ctype, _, tid, count, nbytes, _ = CHUNK.unpack_from(data, off)
            if magic != CHUNK_MAGIC:
                raise ValueError(f"{path}: bad chunk magic at {off}")
            p = off + CHUNK.size
            if p + nbytes > len(data):
                break  # truncated tail
            self._chunk(ctype, tid, count, data[p:p + nbytes])
            off = p + nbytes
        for c in self.calls:
            c.name = self.api_names.get(c.api, f"api{c.api}")

    def _chunk(self, ctype, tid, count, b):
        if ctype == K_API:
            for i in range(count):
                v = API.unpack_from(b, i * 64)
                c = ApiCall()
                c.tid = tid
                c.enter, c.exit = v[0], v[1]
                c.stack, c.api, c.flags, c.result, c.python_stack = v[6], v[7], v[8], v[9], v[10]
                self.calls.append(c)
        elif ctype == K_API_TABLE:
            o = 0
            for _ in range(count):
                api, _cat, _r, _flags, nlen = struct.unpack_from("<HBBHH", b, o)
                self.api_names[api] = b[o + 8:o + 8 + nlen].decode()
                o += pad8(8 + nlen)
        elif ctype == K_STRING:
            o = 0
            for _ in range(count):
                sid, slen = struct.unpack_from("<II", b, o)
                self.strings[sid] = b[o + 8:o + 8 + slen].decode("utf-8", "replace")
                o += pad8(8 + slen)
        elif ctype == K_STACK:
            o = 0
            for _ in range(count):
                sid, depth, kind = struct.unpack_from("<IHH", b, o)
                o += 8
                words = depth * 2 if kind == STACK_PYTHON else depth
                vals = struct.unpack_from(f"<{words}Q", b, o)
                o += 8 * words
                if kind == STACK_PYTHON:
                    self.python_stacks[sid] = list(zip(vals[0::2], vals[1::2]))
                else:
                    self.native_stacks[sid] = list(vals)
        elif ctype == K_NVTX:
            for i in range(count):
                self.nvtx_types.append(struct.unpack_from("<H", b, i * 32 + 28)[0])

    def python_frames(self, stack_id):
        """[(file, function, line)] innermost first; [] for 0."""
        out = []
        for sid, line in self.python_stacks.get(stack_id, []):
            s = self.strings.get(sid, "?\t?")
            f, _, fn = s.partition("\t")
            out.append((f, fn, line))
        return out


def load_dir(d):
    return [Trace(p) for p in sorted(glob.glob(os.path.join(d, "*.sstrace")))]
