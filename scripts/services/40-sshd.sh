# OpenSSH for the hardware-sync credential push over real ssh (DESIGN.md §9; seed 000 §4.3
# EnsureHardwareSyncConfigured) and the daemon's ssh fleet fetch: Debian `openssh-server`, an
# sshd on 127.0.0.1 with its own host key, accepting one throwaway client key for the current
# user. Exports METALFORM_TEST_SSH (user@127.0.0.1:PORT), METALFORM_TEST_SSH_KEY (the client
# key) and METALFORM_TEST_SSH_HOST_KEY (the server's public host key).
apt_install openssh-server openssh-client
ssh_dir="$(mktemp -d /tmp/metalform-sshd.XXXXXX)"
chmod 700 "$ssh_dir"
ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/client_key"
cp "$ssh_dir/client_key.pub" "$ssh_dir/authorized_keys"
ssh_port="$(free_port)"
cat >"$ssh_dir/sshd_config" <<CFG
ListenAddress 127.0.0.1
HostKey $ssh_dir/host_key
AuthorizedKeysFile $ssh_dir/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
PidFile $ssh_dir/sshd.pid
CFG
# Privilege separation needs this directory when sshd runs as root.
if [ "$(id -u)" = 0 ]; then mkdir -p /run/sshd; fi
/usr/sbin/sshd -D -e -f "$ssh_dir/sshd_config" -p "$ssh_port" 2>"$ssh_dir/sshd.log" &
ssh_pid=$!
on_stop "kill $ssh_pid 2>/dev/null; rm -rf '$ssh_dir'"
wait_port "$ssh_port" || { cat "$ssh_dir/sshd.log" >&2; return 1; }
export METALFORM_TEST_SSH="$(id -un)@127.0.0.1:$ssh_port"
export METALFORM_TEST_SSH_KEY="$ssh_dir/client_key"
# The server's public host key, for tests that pin it in a known_hosts file.
export METALFORM_TEST_SSH_HOST_KEY="$ssh_dir/host_key.pub"
echo "sshd: $METALFORM_TEST_SSH" >&2
