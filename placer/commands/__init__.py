"""One module per `placer` sub-command: `register(subparsers)` adds it, `args.func(args)` runs it."""
