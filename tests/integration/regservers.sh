# Servers for the registry-*.sh integration tests; sourced after lib.sh.
#
#   start_registry_as NAME STORAGE [TOP_YAML [HTTP_YAML [https]]]
#       another docker-registry on a free loopback port serving STORAGE,
#       TOP_YAML added at the top level of its config (auth:, proxy:),
#       HTTP_YAML inside http: (tls:).  Sets NAME_PORT, NAME_PID, NAME_LOG.
#   stop_registry_as NAME
#   start_htpasswd_registry NAME STORAGE USER PASS   start_registry_as with
#       htpasswd authentication for USER
#   start_token_server ARGS...   tokenserver.py; sets TOKEN_PORT, TOKEN_LOG
#   start_fault_proxy UPSTREAM ARGS...  faultproxy.py; sets PROXY_PORT,
#       PROXY_REDIRECT_PORT, PROXY_LOG, PROXY_CONTROL
#   make_ca DIR   a CA and a server certificate for 127.0.0.1 and a client
#       certificate, all signed by it, in DIR (ca.pem, server.pem,
#       server-key.pem, client.pem, client-key.pem)
#   auth_file PATH HOST USER PASS   a config.json with an "auth" entry
#   start_private_registry USER PASS   start_htpasswd_registry PRIVATE on
#       the registry's storage, its credentials in $WORK/auth.json, an empty
#       DOCKER_CONFIG, and $WORK open to other users (the access tests run
#       lookups as them); sets PRIVATE_HOST

start_registry_as() {
    need_cmd docker-registry curl
    local name=$1 storage=$2 top=${3:-} http=${4:-} scheme=${5:-http}
    local port config logf pid _ code
    mkdir -p "$storage"
    logf=$WORK/registry-$name.log
    for _ in 1 2 3; do
        port=$(free_port)
        config=$WORK/registry-$name.yml
        {
            cat <<EOY
version: 0.1
log:
  level: warn
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
EOY
            [ -z "$http" ] || printf '%s\n' "$http" | sed 's/^/  /'
            [ -z "$top" ] || printf '%s\n' "$top"
        } >"$config"
        docker-registry serve "$config" >>"$logf" 2>&1 &
        pid=$!
        track_pid "$pid"
        for ((i = 0; i < 200; i++)); do
            _pid_gone "$pid" && break
            if [ "$scheme" = https ]; then
                # it may want a client certificate: a TCP connect will do
                code=000
                (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && code=tcp
            else
                code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/v2/" || true)
            fi
            [ "$code" != 000 ] && break
            sleep 0.05
        done
        if ! _pid_gone "$pid" && [ "$code" != 000 ]; then
            printf -v "${name}_PORT" '%s' "$port"
            printf -v "${name}_PID" '%s' "$pid"
            printf -v "${name}_LOG" '%s' "$logf"
            return 0
        fi
        _stop_pid "$pid"
    done
    tail -n 20 "$logf" >&2 || true
    fail "docker-registry $name did not come up"
}

start_htpasswd_registry() {
    local name=$1 storage=$2 user=$3 pass=$4
    htpasswd -Bbn "$user" "$pass" >"$WORK/htpasswd-$name"
    start_registry_as "$name" "$storage" "auth:
  htpasswd:
    realm: pullfs-test
    path: $WORK/htpasswd-$name"
}

start_private_registry() {
    start_htpasswd_registry PRIVATE "$REGISTRY_STORAGE" "$1" "$2"
    PRIVATE_HOST=127.0.0.1:$PRIVATE_PORT
    auth_file "$WORK/auth.json" "$PRIVATE_HOST" "$1" "$2"
    export DOCKER_CONFIG=$WORK/docker-empty
    mkdir -p "$DOCKER_CONFIG"
    chmod 0755 "$WORK"
}

stop_registry_as() {
    local pidvar=${1}_PID
    _stop_pid "${!pidvar}"
}

# _start_py_server SCRIPT PORTFILE LOG ARGS...: a python server that writes
# its port(s) to PORTFILE once it listens.
_start_py_server() {
    local script=$1 portfile=$2 logf=$3 pid
    shift 3
    python3 "$INTEGRATION_DIR/$script" --port-file "$portfile" "$@" >>"$logf" 2>&1 &
    pid=$!
    track_pid "$pid"
    wait_for 20 test -s "$portfile" || { tail "$logf" >&2; fail "$script did not start"; }
}

start_token_server() {
    python3 -c 'import cryptography' 2>/dev/null || skip "needs python3 cryptography (python3-cryptography)"
    TOKEN_LOG=$WORK/token.log
    _start_py_server tokenserver.py "$WORK/token.port" "$WORK/token.err" --log "$TOKEN_LOG" "$@"
    TOKEN_PORT=$(cat "$WORK/token.port")
}

start_fault_proxy() {
    local upstream=$1
    shift
    PROXY_LOG=$WORK/proxy.log
    PROXY_CONTROL=$WORK/proxy-control.json
    echo '{}' >"$PROXY_CONTROL"
    _start_py_server faultproxy.py "$WORK/proxy.port" "$WORK/proxy.err" \
        --upstream "$upstream" --log "$PROXY_LOG" --control "$PROXY_CONTROL" "$@"
    read -r PROXY_PORT PROXY_REDIRECT_PORT <"$WORK/proxy.port"
}

# proxy_mode JSON: what the fault proxy does from now on (counters restart).
proxy_mode() {
    printf '%s\n' "$1" >"$PROXY_CONTROL.tmp"
    mv "$PROXY_CONTROL.tmp" "$PROXY_CONTROL"
}

make_ca() {
    need_cmd openssl
    local d=$1
    mkdir -p "$d"
    (
        cd "$d"
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=pullfs-test-ca \
            -keyout ca-key.pem -out ca.pem
        openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 \
            -keyout server-key.pem -out server.csr
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 2 -extfile server.ext -out server.pem
        openssl req -newkey rsa:2048 -nodes -subj /CN=pullfs-test-client \
            -keyout client-key.pem -out client.csr
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 2 -extfile client.ext -out client.pem
    ) >"$WORK/openssl.log" 2>&1 || { tail "$WORK/openssl.log" >&2; fail "openssl failed"; }
}

auth_file() {
    local path=$1 host=$2 user=$3 pass=$4
    printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$host" "$(printf '%s:%s' "$user" "$pass" | base64 -w0)" >"$path"
}

# assert_no_secret SECRET FILES...: the secret appears in none of them.
assert_no_secret() {
    local s=$1 f
    shift
    for f in "$@"; do
        [ -f "$f" ] || continue
        ! grep -qF -- "$s" "$f" || fail "a secret appears in $f"
    done
}
