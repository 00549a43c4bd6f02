"""Generate catalog/data/eks-addon-registries.json: the account of the EKS add-on image registry
in each AWS Region, from the EKS User Guide's table of those registries.

Source (download the file at the commit you pass on the command line):

  awsdocs/amazon-eks-user-guide
    latest/ug/workloads/add-ons-images.adoc    "View Amazon container image registries for Amazon EKS add-ons"

Run (no network needed; stdlib only):

  python scripts/generate_eks_registries.py --commit <sha> --adoc add-ons-images.adoc \
      --out catalog/data/eks-addon-registries.json

Kept: rows whose registry is ``<account>.dkr.ecr.<the row's region>.amazonaws.com``, the host the
program builds from a stack's region (``components.registry.registry_host``). Rows whose host is
in another region or another DNS suffix (China, the European Sovereign Cloud) are written under
``notDerivable`` with the host as listed, so a stack in such a region is refused by name.
"""

import argparse
import hashlib
import json
import re
from pathlib import Path

REPOSITORY = "awsdocs/amazon-eks-user-guide"
PATH = "latest/ug/workloads/add-ons-images.adoc"
ROW = re.compile(r"^\|([a-z]+(?:-[a-z]+)+-\d+)\s*\n\|(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.(amazonaws\.[a-z.]+)\s*$", re.M)


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def registries(text: str) -> tuple[dict[str, str], dict[str, str]]:
    accounts, other = {}, {}
    for region, account, host_region, suffix in ROW.findall(text):
        if host_region == region and suffix == "amazonaws.com":
            accounts[region] = account
        else:
            other[region] = f"{account}.dkr.ecr.{host_region}.{suffix}"
    if not accounts:
        raise SystemExit(f"no registry rows found in {PATH}")
    return dict(sorted(accounts.items())), dict(sorted(other.items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commit", required=True, help=f"commit of {REPOSITORY} the file was taken from")
    p.add_argument("--adoc", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    data = args.adoc.read_bytes()
    accounts, other = registries(data.decode())
    doc = {"origin": {"repository": REPOSITORY, "commit": args.commit, "path": PATH, "blob": git_blob(data)},
           "accounts": accounts, "notDerivable": other}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
