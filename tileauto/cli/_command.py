"""The ``tileauto`` command: its parser, ``main`` and the ``env`` verb.

    tileauto cache list [--kind K] [--json]     key, kernel, target, age, size, best latency
    tileauto cache show KEY [--plot IMG]        one entry: facts, the trial table, a picture
    tileauto cache verify [--delete]            hash check of every entry
    tileauto cache clear [--older-than AGE]     delete entries (all, or older than AGE) and
                                                what killed runs left in the staging dir
    tileauto cache clear --logs                 delete the logs no running process writes
    tileauto cache export KEY DIR               copy one entry to DIR (to ship it)
    tileauto cache export KEY --trials FILE     write its trials as JSON (tileauto-trials/1)
    tileauto cache import DIR                   copy an exported entry (or a folder of them) in
    tileauto cache prior KERNEL DIR             every tuned entry of KERNEL as trial files: a
                                                search's prior on another machine
    tileauto cache list|show|verify|clear --remote [URL]   the same, on the fleet's Redis
                                                (show KEY --remote, or show --remote KEY: a
                                                value without :// is the key, not a URL)
    tileauto cache push [KEY...] / pull [KEY...]           seed the fleet's Redis / the disk
    tileauto env                                every TILEAUTO_* setting, as in effect now

Exit codes: 0 success, 1 the operation failed or found problems, 2 a usage error (bad
arguments, a bad ``TILEAUTO_*`` value, a ``--cache-dir`` that is empty, a file or missing),
141 the reader of the output went away (``tileauto cache list | head``: as other Unix tools,
quietly, with 128 + SIGPIPE). An error is one line on stderr; an unexpected one is
``tileauto: internal error: ...`` (exit 1), and ``--debug`` shows its traceback instead.
``python -m tileauto`` is the same command.
"""

from __future__ import annotations

import argparse
import os
import sys

from tileauto.cli import _remote_commands as remote_commands
from tileauto.cli._base import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
    CommandError,
    parse_age,
    settings_of,
)
from tileauto.cli._cache_commands import (
    cmd_clear,
    cmd_export,
    cmd_import,
    cmd_list,
    cmd_prior,
    cmd_show,
    cmd_verify,
)

# ``tileauto --help`` and the cache verbs import only what they use: no torch, no TVM, and
# not even ``typing`` or ``pathlib`` before a verb needs them. Type checkers treat a name
# ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def cmd_env(args: argparse.Namespace) -> int:
    from tileauto.cache.key import versions
    from tileauto.errors import SettingsError
    from tileauto.settings import unknown_variables

    settings = settings_of(args)
    for line in settings.env_lines():  # NAME=value reads back as it is: an env file's lines
        print(line)
    v = versions()
    print()
    print(f"# staging dir: {settings.staging_dir}")
    print(f"# logs dir: {settings.logs_dir}")
    print(f"# tuning cache: {'on' if settings.tuning_cache_enabled else 'off'}")
    print(f"# kernel cache: {'on' if settings.kernel_cache_enabled else 'off'}")
    try:  # checked where workers start (a Ray node reads the driver's values); flagged here
        print(f"# compile workers here: {settings.compile_workers()}")
    except SettingsError as exc:
        print(f"# warning: a tuning on this machine fails: {exc}")
    for name, hint in unknown_variables(os.environ).items():
        print(f"# {name} is set but is not a tileauto setting{hint}")
    print(
        f"# versions: tileauto {v['tileauto']}, TVM {v['tvm']}, cache format {v['format']}, Python {sys.version.split()[0]}"
    )
    return EXIT_OK


def _local_or_remote(local: Any, remote: Any) -> Any:
    """A verb that works on the disk cache, or on the fleet's Redis with ``--remote``."""

    def run(args: argparse.Namespace) -> int:
        return int(remote(args) if args.remote is not None else local(args))

    return run


def _key_after_remote(run: Any) -> Any:
    """``show --remote KEY``: ``--remote`` takes an optional URL, so argparse hands it the
    key. A key is never a URL (it has no ``://``), so such a value is the key and the remote
    is ``TILEAUTO_REMOTE_CACHE``, as ``show KEY --remote`` means."""

    def show(args: argparse.Namespace) -> int:
        if args.key is None and args.remote and "://" not in args.remote:
            args.key, args.remote = args.remote, ""
        if args.key is None:
            raise CommandError(
                "show: expected KEY (the key, or a unique prefix of it), got none; with a "
                "URL: show KEY --remote URL",
                EXIT_USAGE,
            )
        return int(run(args))

    return show


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command and verb; each sets ``func``, the command to run."""
    parser = argparse.ArgumentParser(
        prog="tileauto",
        description="tileauto: inspect and manage the disk cache of tuned and compiled kernels.",
        epilog="Exit codes: 0 success, 1 failure or problems found, 2 usage error (a bad "
        "argument or TILEAUTO_* value; a --cache-dir that is empty, a file or missing), 141 "
        "the reader of the output went away (| head), quietly.",
    )
    parser.add_argument("--version", action="store_true", help="print the tileauto version")
    cache_dir_help = "cache root (default: TILEAUTO_CACHE_DIR or ~/.tileauto/cache)"
    debug_help = "on an unexpected error, print its traceback (not one line)"
    # accepted before the command, after it, or after the verb; the last one given wins
    parser.add_argument("--cache-dir", default=None, help=cache_dir_help)
    parser.add_argument("--debug", action="store_true", help=debug_help)

    def common(p: argparse.ArgumentParser) -> None:
        """``--cache-dir`` and ``--debug``, after a command or a verb too."""
        p.add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_dir_help)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)

    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    cache = sub.add_parser(
        "cache", help="list, show, verify, clear, export or import cache entries"
    )
    common(cache)
    cache_sub = cache.add_subparsers(dest="verb", metavar="VERB")

    def add(name: str, help_text: str, fn: Any) -> argparse.ArgumentParser:
        p = cache_sub.add_parser(name, help=help_text, description=help_text)
        common(p)
        p.set_defaults(func=fn)
        return p

    remote_help = (
        "the fleet's Redis instead of the disk cache: URL, or TILEAUTO_REMOTE_CACHE when "
        "given alone"
    )

    def add_remote(p: argparse.ArgumentParser, local: Any, remote: Any) -> None:
        p.add_argument(
            "--remote", nargs="?", const="", default=None, metavar="URL", help=remote_help
        )
        p.set_defaults(func=_local_or_remote(local, remote))

    p = add("list", "list entries: key, kernel, target, age, size, best latency", cmd_list)
    add_remote(p, cmd_list, remote_commands.cmd_list)
    p.add_argument("--kind", choices=("all", "autotuner", "kernels"), default="all")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p = add("show", "show one entry: its facts and the table of every config's trial", cmd_show)
    add_remote(p, cmd_show, remote_commands.cmd_show)
    p.set_defaults(func=_key_after_remote(p.get_default("func")))
    # optional for argparse only: ``show --remote KEY`` gives the key to --remote
    p.add_argument("key", metavar="KEY", nargs="?", help="the key, or a unique prefix of it")
    p.add_argument(
        "--plot",
        metavar="IMG",
        help='also draw the trials into IMG (.png, .svg or .pdf; needs pip install "tileauto[plot]")',
    )
    p = add(
        "verify",
        "check the sha256 of every file of every entry, ownership and permissions",
        cmd_verify,
    )
    p.add_argument("--kind", choices=("all", "autotuner", "kernels"), default="all")
    p.add_argument("--delete", action="store_true", help="delete the entries that fail")
    p.add_argument("-v", "--verbose", action="store_true", help="also list the entries that pass")
    add_remote(p, cmd_verify, remote_commands.cmd_verify)
    p = add(
        "clear",
        "delete entries (all of them, or those older than --older-than) and what killed runs "
        "left in the staging dir; with --logs, delete the logs instead",
        cmd_clear,
    )
    p.add_argument(
        "--older-than",
        type=parse_age,
        metavar="AGE",
        help="only entries (or logs) older than AGE (e.g. 7d, 12h, 30m, 90s)",
    )
    p.add_argument("--kind", choices=("all", "autotuner", "kernels"), default="all")
    p.add_argument(
        "--logs",
        action="store_true",
        help="delete the tuning and worker logs no running process writes (entries are kept)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted; delete nothing"
    )
    add_remote(p, cmd_clear, remote_commands.cmd_clear)
    p = add(
        "export",
        "copy one entry to DIR, a new or empty folder, to ship it; or write its trials as JSON",
        cmd_export,
    )
    p.add_argument("key", metavar="KEY", help="the key, or a unique prefix of it")
    p.add_argument("dir", metavar="DIR", nargs="?", help="destination folder (created)")
    p.add_argument(
        "--trials",
        metavar="FILE",
        help='write the trials of a tuned entry to FILE as JSON ("format": "tileauto-trials/1"; '
        "- for stdout); a new file: an existing one, or a link, is refused. Given with DIR, "
        "DIR is exported first (FILE may be inside it)",
    )
    p = add(
        "import",
        "copy an exported entry, every entry in a folder, or another cache's entries, into the "
        "cache",
        cmd_import,
    )
    p.add_argument(
        "dir", metavar="DIR", help="an exported entry, a folder of them, or another cache's root"
    )
    p = add(
        "prior",
        "write every tuned entry of KERNEL as a trial file (tileauto-trials/1, gzipped) into "
        "DIR: a prior for a search on another machine (prior='DIR')",
        cmd_prior,
    )
    p.add_argument(
        "kernel", metavar="KERNEL",
        help="the kernel as `cache list` shows it: MODULE:NAME for one module's, NAME for all",
    )  # fmt: skip
    p.add_argument("dir", metavar="DIR", help="the folder to write into (created)")
    p = add(
        "push",
        "publish tuned entries to the fleet's Redis (with their kernels, signed, when "
        "TILEAUTO_REMOTE_CACHE_KEY is set): seed a fleet from a machine that has tuned",
        remote_commands.cmd_push,
    )
    p.add_argument("keys", metavar="KEY", nargs="*", help="only these entries (default: all)")
    p.add_argument("--remote", default=None, metavar="URL", help="default: TILEAUTO_REMOTE_CACHE")
    p = add(
        "pull",
        "write the fleet's signed entries into the disk cache (needs TILEAUTO_REMOTE_CACHE_KEY)",
        remote_commands.cmd_pull,
    )
    p.add_argument("keys", metavar="KEY", nargs="*", help="only these entries (default: all)")
    p.add_argument("--remote", default=None, metavar="URL", help="default: TILEAUTO_REMOTE_CACHE")
    cache.set_defaults(func=None, parser=cache)

    env = sub.add_parser(
        "env",
        help="print every TILEAUTO_* setting as in effect now",
        description="print every TILEAUTO_* setting as in effect now",
    )
    common(env)
    env.set_defaults(func=cmd_env)
    parser.set_defaults(func=None, parser=parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not as a warning at the interpreter's exit
    except SystemExit:  # argparse's --help and usage errors
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            raise SystemExit(_output_gone()) from None
        raise
    except BrokenPipeError:  # the final flush
        return _output_gone()
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        # the package this module belongs to is loaded; no import edge back to its root
        print(f"tileauto {sys.modules['tileauto'].__version__}")
        return EXIT_OK
    if args.func is None:
        getattr(args, "parser", parser).print_help(sys.stderr)
        return EXIT_USAGE
    from tileauto.errors import CacheError, SettingsError, TileautoError

    try:
        return int(args.func(args))
    except CommandError as exc:
        print(f"tileauto: error: {exc}", file=sys.stderr)
        return exc.code
    except CacheError as exc:
        print(f"tileauto: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except SettingsError as exc:
        print(f"tileauto: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        print("tileauto: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if _stdout_closed():  # `tileauto env | head -1`: the reader has all it wanted
            return _output_gone()
        print(f"tileauto: error: {exc}", file=sys.stderr)  # a socket's, say
        return EXIT_FAIL
    except (OSError, TileautoError) as exc:
        print(f"tileauto: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except Exception as exc:  # a bug: one line (the CLI's promise), the traceback on request
        if args.debug:
            raise
        print(
            f"tileauto: internal error: {type(exc).__name__}: {exc} (please report; "
            "--debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAIL


def _stdout_closed() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture)
        return False


def _output_gone() -> int:
    """End quietly once the reader of standard output went away (``| head``): what is still
    buffered goes to /dev/null, so that no error is printed at exit. Returns 141."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass
    return EXIT_PIPE
