"""Exported runs: the `.tlog` file format, export, import and the replay check (issue 13)."""

from tether.ops.tlog.check import FileCheck, check_file, check_tlog
from tether.ops.tlog.export import export_run
from tether.ops.tlog.load import Imported, Tlog, import_run, import_tlog, read_tlog

__all__ = [
    "FileCheck",
    "Imported",
    "Tlog",
    "check_file",
    "check_tlog",
    "export_run",
    "import_run",
    "import_tlog",
    "read_tlog",
]
