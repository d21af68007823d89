"""`acceptance profiles`: the built-in profiles, or one resolved."""

from __future__ import annotations

from .common import EXIT_OK, UsageError
from ..rules.profile import format_profile, format_profile_list, load_profile


def add_parser(sub) -> None:
    profiles = sub.add_parser("profiles", help="list the built-in profiles, or show one resolved",
                              description="`acceptance profiles` lists the built-in profiles; "
                                          "`acceptance profiles show NAME|PATH` prints one with every "
                                          "value resolved (defaults filled, units normalized).")
    profiles.add_argument("action", nargs="?", choices=["show"])
    profiles.add_argument("name", nargs="?", metavar="NAME|PATH")
    profiles.add_argument("--names", action="store_true", help="only the built-in names, one per line")
    profiles.set_defaults(func=cmd_profiles)


def cmd_profiles(args) -> int:
    if args.names:
        from ..rules.profile import builtin_names
        print("\n".join(builtin_names()))
        return EXIT_OK
    if args.action is None:
        print(format_profile_list())
        print("\nshow one: acceptance profiles show NAME   (or a path to your own .toml)")
        return EXIT_OK
    if not args.name:
        raise UsageError("profiles show needs a profile name or path")
    print(format_profile(load_profile(args.name)))
    return EXIT_OK
