"""The webhook certificates a cert-controller rotator (Kueue's, LeaderWorkerSet's) accepts as its
own, so a local manager keeps them and injects the CA into its webhook configurations."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServingCertificates:
    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")

    def as_files(self) -> dict[str, bytes]:
        return dict(zip(self.FILES, (self.ca_cert, self.ca_key, self.cert, self.key), strict=True))

    @classmethod
    def load(cls, directory: Path) -> ServingCertificates | None:
        paths = [directory / f for f in cls.FILES]
        if not all(p.exists() for p in paths):
            return None
        return cls(*(p.read_bytes() for p in paths))

    @classmethod
    def generate(cls, ca_name: str, organization: str, service_dns: str) -> ServingCertificates:
        """A CA and a serving certificate in the shape a cert-controller rotator (Kueue's,
        LeaderWorkerSet's) makes and accepts: RSA keys in PKCS#1, the CA valid for ``ca_name``,
        the server for the webhook Service's DNS name plus 127.0.0.1 (for the apiserver); ten
        years, past the 90-day look-ahead."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        def pem_key(key: rsa.RSAPrivateKey) -> bytes:
            return key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,  # PKCS#1, what the rotator parses
                serialization.NoEncryption(),
            )

        now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        until = now + datetime.timedelta(days=3650)
        ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ca_subject = x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, ca_name),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            ]
        )
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_subject)
            .issuer_name(ca_subject)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=True,
                    key_cert_sign=True,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service_dns)]))
            .issuer_name(ca_subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName(service_dns),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return cls(
            ca_cert=ca_cert.public_bytes(serialization.Encoding.PEM),
            ca_key=pem_key(ca_key),
            cert=cert.public_bytes(serialization.Encoding.PEM),
            key=pem_key(key),
        )
