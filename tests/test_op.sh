#!/bin/sh
# Tests of clmoe-op (to be written).
exit 77
