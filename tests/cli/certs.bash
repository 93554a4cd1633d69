# Test certificates for the TLS tests (security.sh, gateway_tls.sh), made with the openssl command
# at test time: nothing secret is committed and nothing expires in the repository. Sourced, not a
# test itself. Keys are EC P-256 (fast to make); valid certificates last 7 days.
#
# make_certs DIR writes, in DIR:
#   ca.pem, ca.key                  a test CA
#   server.pem, server.key          signed by the CA, SAN IP:127.0.0.1 and DNS:localhost (serverAuth)
#   client.pem, client.key          signed by the CA, extendedKeyUsage clientAuth (mutual TLS)
#   expired.pem, expired.key        like server.pem, but valid only in 2020 (expired)
#   wronghost.pem, wronghost.key    signed by the CA, SAN DNS:wrong.example only
#   other-ca.pem, other-ca.key      a second CA that no one trusts
#   other-client.pem, other-client.key   a client certificate from other-ca
# and the scratch files openssl needs (openssl.cnf, *.csr, the expired certificate's `openssl ca`
# database). openssl's output goes to DIR/openssl.log, printed when a step fails; make_certs then
# returns 1 (with `set -e` the test stops there).

make_certs() {
  local dir=$1
  mkdir -p "$dir"
  # A bash of its own: errexit holds inside it whatever the caller's context (inside `if`, a
  # subshell would ignore it).
  if ! bash -c "$(declare -f _make_certs_in_cwd); set -euo pipefail; cd \"\$1\"; _make_certs_in_cwd" \
       make_certs "$dir" > "$dir/openssl.log" 2>&1; then
    echo "make_certs $dir: openssl failed:" >&2
    cat "$dir/openssl.log" >&2
    return 1
  fi
}

# The steps, in the current directory (run by make_certs in a bash with errexit).
_make_certs_in_cwd() {
  # One throwaway config for every step: the system's openssl.cnf plays no part. `openssl req` only
  # needs a subject (given with -subj); the [ca] section serves the expired certificate, the one
  # place where the validity dates must be chosen (Debian 12's openssl 3.0 has no -not_before or
  # -not_after for req and x509, but `openssl ca` takes -startdate and -enddate).
  cat > openssl.cnf << 'EOF'
[req]
distinguished_name = req_dn
prompt = no
[req_dn]
CN = unused

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid

[wronghost_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:wrong.example
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid

[ca]
default_ca = test_ca
[test_ca]
database = index.txt
new_certs_dir = .
serial = serial
certificate = ca.pem
private_key = ca.key
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = none
[any_name]
commonName = supplied
EOF
  : > index.txt
  echo 01 > serial

  local name
  for name in ca other-ca server client expired wronghost other-client; do
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$name.key"
  done
  chmod 600 ./*.key

  # The CAs: self-signed.
  openssl req -config openssl.cnf -new -x509 -key ca.key -subj "/CN=Steady test CA" -days 7 \
    -extensions ca_ext -out ca.pem
  openssl req -config openssl.cnf -new -x509 -key other-ca.key -subj "/CN=Another test CA" -days 7 \
    -extensions ca_ext -out other-ca.pem

  # sign NAME CN CA EXTENSIONS: NAME.pem for NAME.key, signed by CA.pem, valid from now for 7 days.
  sign() {
    openssl req -config openssl.cnf -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
    openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 7 -sha256 -extfile openssl.cnf -extensions "$4" -out "$1.pem"
  }
  sign server localhost ca server_ext
  sign client steady-test-client ca client_ext
  sign wronghost wrong.example ca wronghost_ext
  sign other-client steady-other-client other-ca client_ext

  # Expired: the server's names, valid for one day in 2020.
  openssl req -config openssl.cnf -new -key expired.key -subj "/CN=localhost" -out expired.csr
  openssl ca -config openssl.cnf -batch -notext -startdate 20200101000000Z -enddate 20200102000000Z \
    -extensions server_ext -in expired.csr -out expired.pem

  # Checks: the chain and names each test relies on.
  openssl verify -CAfile ca.pem server.pem client.pem wronghost.pem
  openssl verify -CAfile other-ca.pem other-client.pem
  if openssl verify -CAfile ca.pem expired.pem; then echo "expired.pem verifies"; return 1; fi
  if openssl verify -CAfile ca.pem other-client.pem; then echo "other-client.pem verifies"; return 1; fi
  openssl x509 -in server.pem -noout -ext subjectAltName | grep -q "IP Address:127.0.0.1"
}
