# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-ins for an engine's GPU dependencies, so that its own CLI parser runs on a machine without them.

SGLang and vLLM import torch, triton and friends on the way to their argument parsers, but the parsers
themselves are plain argparse over the engines' config classes. In a side environment holding only the
engine's wheel (installed --no-deps) and the few pure-Python packages the parser needs, this module fakes
the rest: torch, triton, torchvision, and any other top-level module that the engine's own code imports
but is not installed. A fake is permissive: every attribute is another fake, calling one gives an
instance (or the function itself, when used as a decorator), booleans are false (no CUDA). Options,
choices and defaults come from the engine's own code, never from here: the parsers built this way were
compared action by action with ones built against a real CPU torch and were identical (SGLang 0.5.9,
0.5.23; vLLM 0.34.0).

Each side environment's site-packages holds a .pth file calling boot(PROFILE) (written by `make
engine-envs`), so that `python -m sglang.launch_server --help` and `vllm serve --help=all` work as the
real commands do; ENGINE_STUBS=0 in the environment turns the fakes off.

This is a test stand-in at the hardware boundary: it lives under tests/ and is never shipped.
"""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import sys
import types

# What each side environment fakes. fake: top-level (or dotted) modules always faked, even if present;
# never: missing modules that must stay missing (the engine probes for them and copes).
PROFILES = {
    # sglang 0.5.9 imports transformers unconditionally (srt/utils/hf_transformers_utils.py): faked as missing
    "sglang-0.5.9": dict(engine="sglang", fake=("torch", "triton", "torchvision"), never=()),
    # sglang 0.5.23 treats a missing transformers as absent; a fake one breaks its msgspec/pydantic models
    "sglang-0.5.23": dict(engine="sglang", fake=("torch", "triton", "torchvision"), never=("transformers",)),
    # vllm.ir is a compiled-kernel registry that imports torch.library at module level
    "vllm-0.34.0": dict(engine="vllm", fake=("torch", "triton", "torchvision", "vllm.ir"), never=()),
}

# modules the engines probe to detect exotic accelerators: they must stay missing
NEVER = frozenset(("torch_npu", "torch_musa", "habana_frameworks", "intel_extension_for_pytorch", "torch_xla",
                   "mindspore", "vllm_ascend", "amdsmi", "pyrsmi", "ixformer", "torchada"))

# attributes with a fixed value (no GPU, CUDA 12.9 build), and ones whose access fails as without a driver
VALUES = {"torch.version.hip": None, "torch.version.cuda": "12.9", "torch.version.git_version": "",
          "torch.cuda.is_available": lambda: False, "torch.cuda.device_count": lambda: 0}
RAISE = frozenset(("triton.runtime.driver.active", "torch.npu", "torch.hpu", "torch.musa", "torch.mlu",
                   "torch._C._cuda_getDeviceCount"))
VERSIONS = {"torch": "2.9.1", "triton": "3.5.1", "torchvision": "0.24.1"}  # replaced by the engine's pins


def _is_dunder(name):
    return name.startswith("__") and name.endswith("__")


def _child(parent, name, module):
    path = "%s.%s" % (parent, name)
    if path in VALUES:
        return VALUES[path]
    if path in RAISE or (path.startswith("torch.version.") and path not in VALUES):
        raise AttributeError("stub: %s is not available here" % path)
    return _FakeMeta(name, (Fake,), {"__module__": module, "_path": path})


def _bare_decorator(args, kwargs):
    return len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], (Fake, _FakeMeta))


class _FakeMeta(abc.ABCMeta):
    """A fake class: attributes are fake classes, subscripting gives itself, comparisons are false. An ABCMeta,
    so that a class deriving from a fake and an abstract base class has a metaclass."""

    def __getattr__(cls, name):
        if _is_dunder(name):
            raise AttributeError(name)
        sub = _child(cls._path, name, cls.__module__)
        setattr(cls, name, sub)
        return sub

    def __call__(cls, *args, **kwargs):
        if _bare_decorator(args, kwargs):  # @torch.compile, @triton.jit
            return args[0]
        return type.__call__(cls, *args, **kwargs)

    def register(cls, *args, **kwargs):  # AutoConfig.register(name, cls) and ABC.register
        return args[-1] if args else None

    def __getitem__(cls, item):
        return cls

    def __setitem__(cls, key, value):
        pass

    def __delitem__(cls, key):
        pass

    def __bool__(cls):
        return True

    def __int__(cls):  # int(torch.distributed.ReduceOp.SUM)
        return 0

    __index__ = __int__

    def __float__(cls):
        return 0.0

    def _same(cls, *other):
        return cls

    # not | : `torch.dtype | Literal[...]` must stay a typing union, as vLLM's config fields read it
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same
    __floordiv__ = __mod__ = __pow__ = __and__ = __neg__ = _same

    def __iter__(cls):
        return iter(())

    def __len__(cls):
        return 0

    def __contains__(cls, item):
        return False

    def __repr__(cls):
        return "<fake %s>" % cls._path

    def __lt__(cls, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__


class Fake(metaclass=_FakeMeta):
    _path = "fake"

    def __init_subclass__(cls, **kwargs):
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):  # a fake used as a pydantic field type
        from pydantic_core import core_schema
        return core_schema.any_schema()

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if _is_dunder(name):
            raise AttributeError(name)
        return getattr(type(self), name)()

    def __call__(self, *args, **kwargs):
        if _bare_decorator(args, kwargs):
            return args[0]
        return type(self)()

    def __getitem__(self, item):
        return type(self)()

    def __setitem__(self, key, value):
        pass

    def __delitem__(self, key):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __contains__(self, item):
        return False

    def __bool__(self):
        return False  # torch.cuda.is_available() and friends

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __str__(self):
        return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return id(type(self))

    def __lt__(self, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def _same(self, *other):
        return type(self)()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same
    __floordiv__ = __mod__ = __pow__ = __or__ = __ror__ = __and__ = __neg__ = _same


class _DType(Fake):
    """torch.float16 and friends: distinct, hashable, named, with an itemsize (config code maps names to them)."""

    _path = "torch.dtype"

    def __init__(self, name="", itemsize=0, floating=False):
        super().__init__()
        self._name, self.itemsize, self.is_floating_point = name, itemsize, floating
        self.is_complex, self.is_signed = False, not name.startswith("uint")

    def __repr__(self):
        return "torch.%s" % self._name

    __str__ = __repr__

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return hash(self._name)


class _Library(Fake):
    """torch.library.Library(ns, kind): custom-op registries read back their namespace."""

    _path = "torch.library.Library"

    def __init__(self, ns="", kind="", *args, **kwargs):
        super().__init__()
        self.ns, self.kind = ns, kind


VALUES["torch.dtype"] = _DType
VALUES["torch.library.Library"] = _Library
for _name, _size, _floating, _aliases in (
        ("float16", 2, True, ("half",)), ("bfloat16", 2, True, ()), ("float32", 4, True, ("float",)),
        ("float64", 8, True, ("double",)), ("int8", 1, False, ()), ("uint8", 1, False, ()),
        ("int16", 2, False, ("short",)), ("uint16", 2, False, ()), ("int32", 4, False, ("int",)),
        ("uint32", 4, False, ()), ("int64", 8, False, ("long",)), ("uint64", 8, False, ()), ("bool", 1, False, ()),
        ("float8_e4m3fn", 1, True, ()), ("float8_e5m2", 1, True, ()), ("float8_e4m3fnuz", 1, True, ()),
        ("float8_e5m2fnuz", 1, True, ()), ("float8_e8m0fnu", 1, True, ()), ("float4_e2m1fn_x2", 1, True, ()),
        ("complex64", 8, False, ()), ("complex128", 16, False, ())):
    _dtype = _DType(_name, _size, _floating)
    for _alias in (_name,) + _aliases:
        VALUES["torch." + _alias] = _dtype


class FakeModule(types.ModuleType):
    def __getattr__(self, name):
        if _is_dunder(name):
            raise AttributeError(name)
        sub = _child(self.__name__, name, self.__name__)
        setattr(self, name, sub)
        return sub


def _importer():
    """The top-level package of the code doing the current import (past importlib's own frames)."""
    frame = sys._getframe(2)  # pylint: disable=protected-access
    while frame and (frame.f_code.co_filename.startswith("<frozen")
                     or frame.f_globals.get("__name__") in (__name__, "importlib", "importlib.util")):
        frame = frame.f_back
    return (frame.f_globals.get("__name__") or "").partition(".")[0] if frame else ""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """fake: always faked. auto_from: a module missing for real, imported by one of these packages, is faked."""

    def __init__(self, fake=(), auto_from=(), never=()):
        self.fake, self.auto_from, self.never = set(fake), set(auto_from), NEVER | set(never)

    def _faked(self, fullname):
        return any(fullname == name or fullname.startswith(name + ".") for name in self.fake)

    def find_spec(self, fullname, path=None, target=None):
        if self._faked(fullname):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if (not self.auto_from or "." in fullname or fullname in self.never
                or fullname in sys.stdlib_module_names or _importer() not in self.auto_from):
            return None
        mine = [finder for finder in sys.meta_path if isinstance(finder, _Finder)]
        saved = sys.meta_path[:]
        sys.meta_path[:] = [finder for finder in saved if finder not in mine]
        try:  # really missing (asking no fake finder)?
            real = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path[:] = saved
        if real is not None:
            return None
        self.fake.add(fullname)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = FakeModule(spec.name)
        module.__path__ = []
        module.__version__ = VERSIONS.get(spec.name, "0.0.0")
        return module

    def exec_module(self, module):
        pass


def _versions_from_pins(distribution):
    """Fakes report the versions the engine pins (torch==2.9.1 ...): some code compares them."""
    for requirement in importlib.metadata.requires(distribution) or ():
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*==\s*([0-9][^;,\s]*)\s*(;.*)?$", requirement)
        if match and "extra ==" not in (match.group(3) or ""):
            VERSIONS[match.group(1).lower().replace("-", "_")] = match.group(2)


def install(profile):
    """Fake what PROFILES[profile] says, once per interpreter."""
    if any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return
    spec = PROFILES[profile]
    _versions_from_pins(spec["engine"])
    if spec["engine"] == "vllm":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # else "Failed to infer device type"
    for name in spec["fake"]:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, _Finder(fake=spec["fake"]))
    sys.meta_path.append(_Finder(auto_from=(spec["engine"],), never=spec["never"]))


def boot(profile):
    """The side environment's .pth entry point."""
    if os.environ.get("ENGINE_STUBS", "1") != "0":
        install(profile)
