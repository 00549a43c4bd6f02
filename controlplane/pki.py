"""The test cluster's keys and certificates: one CA, serving certificates for 127.0.0.1, the service
account signing key. Made fresh for every cluster (nothing is kept between runs)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _certificate(subject: str, key, issuer_name: x509.Name, issuer_key, ca: bool, hosts: tuple[str, ...] = ()):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if hosts:
        names = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h) for h in hosts]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class Pki:
    """Files under ``root``: ``ca.crt``; ``<name>.crt``/``<name>.key`` per serving certificate;
    ``sa.key``/``sa.pub`` for service account tokens."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca = _certificate("moe-rl-test-ca", self._ca_key, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                                                              "moe-rl-test-ca")]),
                                self._ca_key, ca=True)
        self.ca = root / "ca.crt"
        self.ca.write_bytes(self._ca.public_bytes(serialization.Encoding.PEM))
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key, self.sa_pub = root / "sa.key", root / "sa.pub"
        _write_key(self.sa_key, sa)
        self.sa_pub.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))

    def serving(self, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> tuple[Path, Path]:
        """(certificate, key) of a server at ``hosts``, signed by the CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(name, key, self._ca.subject, self._ca_key, ca=False, hosts=hosts)
        crt, key_path = self.root / f"{name}.crt", self.root / f"{name}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
        return crt, key_path
