#!/usr/bin/env bash
# Issue 21, session 76: bench/results/h100/queue/run.sh again, after the partner warpgroup's stop flag became
# warpgroup-uniform (warpgroup_agrees in bench/gpu/common.cuh): the run that fixed the C = 10 fault. Same driver.
exec bash bench/results/h100/queue/run.sh
