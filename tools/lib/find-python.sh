# Find a given Python interpreter; sourced by tools/run-tests and
# tools/verify-patches.
#
#   find_python 3.8     # prints the path of a working python3.8, or fails
#
# Looks on PATH, then under pyenv ($PYENV_ROOT or ~/.pyenv), then in the
# usual prefixes. pyenv's shims are skipped: they exist for every version
# but fail for the ones not installed, and tox 4 does not see through them
# anyway. An interpreter counts only if it can create a venv.

find_python() {
    local v=$1 c
    for c in "$(command -v "python$v" 2>/dev/null || true)" \
             "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v" \
             /usr/local/bin/"python$v" /usr/bin/"python$v" \
             /opt/python/"$v"*/bin/"python$v"; do
        case "$c" in */shims/*) continue ;; esac
        if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import venv' 2>/dev/null
        then
            echo "$c"
            return 0
        fi
    done
    return 1
}
