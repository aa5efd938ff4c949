#!/bin/sh
# The interpreter of //third_party/python:python3_runtime: whichever python3 is first on PATH
# (Debian 12's /usr/bin/python3 on a bare system). See BUILD for why not `python`.
exec python3 "$@"
