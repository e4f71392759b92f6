#!/bin/bash
#
# devstack plugin for nova-revert-lock: run nova-compute with the fix for
# Nova bug 1879878 (resize confirm/revert race with the resource tracker).
#
#   stack install      install the package into Nova's Python environment
#   stack extra        write [revert_lock] into $NOVA_CPU_CONF, run
#                      `nova-revert-lock check` (a refusal fails the stack)
#                      and restart n-cpu through nova-compute-revert-lock
#   unstack            nothing: devstack stops n-cpu (same unit) itself
#   clean              uninstall the package
#
# NOTE: devstack's start_nova_compute rebuilds $NOVA_CPU_CONF from
# $NOVA_CONF and starts n-cpu with a fixed nova-compute command line, after
# the post-config phase. So the configuration is written, and the service
# restarted through the wrapper, in the extra phase: then the file exists
# in its final form, and stack.sh checks that the computes are up (and
# discovers them) after this phase.
#
# NOTE: on every release, from Train to 2026.2, the wrapper lets Nova's own
# nova.cmd.compute set up concurrency before anything else is imported, so
# the restarted n-cpu runs the model nova-compute would: eventlet up to
# 2026.1, native threading by default on 2026.2 ([DEFAULT]
# concurrency_backend in $NOVA_CPU_CONF chooses otherwise). Nothing here
# depends on the release; an environment variable set on devstack's own
# n-cpu unit does not survive run_process, a configuration option does.

# Save trace setting
_XTRACE_NOVA_REVERT_LOCK=$(set +o | grep xtrace)
set -o xtrace

function install_nova_revert_lock {
    # setup_develop installs where Nova is installed (the global
    # site-packages, or devstack's venv), so the console scripts land in
    # $NOVA_BIN_DIR next to nova-compute.
    setup_develop $NOVA_REVERT_LOCK_DIR
}

# The [revert_lock] section is written by the same function tools/cloud
# uses (devstack/lib/revert-lock-conf), with devstack's iniset.
source $(dirname ${BASH_SOURCE[0]})/lib/revert-lock-conf

function configure_nova_revert_lock {
    nova_revert_lock_write_conf $NOVA_CPU_CONF
}

# Print the state `nova-revert-lock check` reports (patched,
# already-fixed, refused, disabled), or "unavailable".
function nova_revert_lock_state {
    local report
    report=$($NOVA_BIN_DIR/nova-revert-lock check \
        --config-file $NOVA_CPU_CONF --format json) || true
    echo "$report" | $PYTHON -c \
        'import json, sys; print(json.load(sys.stdin).get("state"))' \
        2>/dev/null || echo unavailable
}

function check_nova_revert_lock {
    local state
    mkdir -p $(dirname $NOVA_REVERT_LOCK_CHECK_LOG)
    # The table, for the logs; its exit code is judged through the state.
    $NOVA_BIN_DIR/nova-revert-lock check --config-file $NOVA_CPU_CONF \
        > $NOVA_REVERT_LOCK_CHECK_LOG 2>&1 || true
    cat $NOVA_REVERT_LOCK_CHECK_LOG
    state=$(nova_revert_lock_state)
    echo "nova-revert-lock: $state on $(hostname)"
    case "$state" in
        patched|already-fixed)
            ;;
        disabled)
            echo "nova-revert-lock: disabled by NOVA_REVERT_LOCK_ENABLED;" \
                "nova-compute runs without the fix"
            ;;
        refused)
            die $LINENO "nova-revert-lock refused to patch this Nova; see" \
                "$NOVA_REVERT_LOCK_CHECK_LOG"
            ;;
        *)
            die $LINENO "nova-revert-lock check gave no report" \
                "($state); see $NOVA_REVERT_LOCK_CHECK_LOG"
            ;;
    esac
    local expected=$NOVA_REVERT_LOCK_EXPECT_STATE
    if [[ -n "$expected" && "$state" != "$expected" ]]; then
        die $LINENO "nova-revert-lock: expected $expected, got $state"
    fi
}

# Start one compute service through the wrapper, in the group devstack
# gives it, with devstack's own command line otherwise.
function _restart_compute_through_wrapper {
    local service=$1
    local args=$2
    local group=""
    if [[ "$VIRT_DRIVER" == "libvirt" ]]; then
        group=$LIBVIRT_GROUP
    fi
    stop_process $service
    run_process $service \
        "$NOVA_BIN_DIR/nova-compute-revert-lock $args" $group
}

function start_nova_revert_lock {
    # Same PATH hack as devstack's start_nova_compute, for rootwrap.
    local old_path=$PATH
    export PATH=$NOVA_BIN_DIR:$PATH
    if [[ "$VIRT_DRIVER" == "fake" ]]; then
        local i fake_conf
        for i in $(seq 1 $NUMBER_FAKE_NOVA_COMPUTE); do
            fake_conf="${NOVA_FAKE_CONF}-$i"
            _restart_compute_through_wrapper n-cpu-$i \
                "--config-file $NOVA_CPU_CONF --config-file $fake_conf"
        done
    else
        _restart_compute_through_wrapper n-cpu \
            "--config-file $NOVA_CPU_CONF"
    fi
    export PATH=$old_path
}

function cleanup_nova_revert_lock {
    pip_uninstall nova-revert-lock
    rm -f $NOVA_REVERT_LOCK_CHECK_LOG
}

if is_service_enabled nova-revert-lock; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing nova-revert-lock"
        install_nova_revert_lock
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        if is_service_enabled n-cpu; then
            echo_summary "Running nova-compute through nova-revert-lock"
            configure_nova_revert_lock
            check_nova_revert_lock
            start_nova_revert_lock
        fi
    fi

    if [[ "$1" == "unstack" ]]; then
        # n-cpu keeps its unit name: devstack's stop_nova stops it.
        :
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_nova_revert_lock
    fi
fi

# Restore xtrace
$_XTRACE_NOVA_REVERT_LOCK
