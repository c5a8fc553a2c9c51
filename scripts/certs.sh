#!/usr/bin/env bash
# Makes a cluster CA and one certificate per node for limitd's TLS: clients,
# Raft and node-to-node forwarding all use the node certificate (--tls-cert,
# --tls-key) and trust the CA (--tls-ca). See docs/SECURITY.md.
#
#   scripts/certs.sh DIR [NODE...]      # default nodes: n1 n2 n3
#   SANS="IP:10.0.0.5,DNS:limitd-1.example" scripts/certs.sh DIR n1
#   SHARED=1 scripts/certs.sh DIR node     # one certificate for every node
#
# Writes DIR/ca.pem, DIR/ca-key.pem and, per node, DIR/NODE.pem and
# DIR/NODE-key.pem (ECDSA P-256). Every node certificate is valid for
# 127.0.0.1, ::1 and localhost plus SANS, as TLS server and client, for DAYS
# days (default 365), and names its node: NODE is the node's --node-id, in a
# URI SAN limitd://node/NODE; the cluster accepts the certificate only as
# that node. SHARED=1 leaves the node out (a certificate several nodes share,
# as deploy/kubernetes does: it is accepted as any node, so a stolen key
# speaks as any). An existing CA in DIR is reused, so more nodes can be
# added later; keep ca-key.pem off the nodes.
set -euo pipefail

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
dir=$1
shift
nodes=("$@")
[[ ${#nodes[@]} -eq 0 ]] && nodes=(n1 n2 n3)
days=${DAYS:-365}
sans="IP:127.0.0.1,IP:::1,DNS:localhost${SANS:+,$SANS}"

command -v openssl >/dev/null || { echo "certs.sh: openssl is required" >&2; exit 1; }
mkdir -p "$dir"
umask 077

if [[ ! -f $dir/ca.pem || ! -f $dir/ca-key.pem ]]; then
	openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca-key.pem"
	openssl req -x509 -new -key "$dir/ca-key.pem" -sha256 -days "$days" \
		-subj "/CN=limitd cluster CA" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" \
		-out "$dir/ca.pem"
	echo "certs.sh: made CA $dir/ca.pem" >&2
fi

for node in "${nodes[@]}"; do
	key=$dir/$node-key.pem
	id=$node
	[[ -n ${SHARED:-} ]] && id=
	crt=$dir/$node.pem
	openssl ecparam -name prime256v1 -genkey -noout -out "$key"
	ext=$(mktemp)
	printf '%s\n' "basicConstraints=CA:FALSE" \
		"keyUsage=critical,digitalSignature,keyEncipherment" \
		"extendedKeyUsage=serverAuth,clientAuth" \
		"subjectAltName=$sans${id:+,URI:limitd://node/$id}" >"$ext"
	openssl req -new -key "$key" -subj "/CN=$node" |
		openssl x509 -req -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial \
			-days "$days" -sha256 -extfile "$ext" -out "$crt" 2>/dev/null
	rm -f "$ext"
	openssl verify -CAfile "$dir/ca.pem" "$crt" >/dev/null
	echo "certs.sh: made $crt and $key ($sans${id:+, URI:limitd://node/$id})" >&2
done
chmod 644 "$dir/ca.pem"
for node in "${nodes[@]}"; do chmod 644 "$dir/$node.pem"; done
