"""The AWS isolation policies on broken variants of real stacks: take the recorded graph of a
mocked run, change one input, and the policy must name the resource (issue: IMDS hop limit 2,
NotAction, a team role widened to the bucket, a narrowed or wrong-bucket TLS deny, extra trust
principals, a role bound to another team's namespace, a public API endpoint; and the checkpoint
key, retention, node pulls and S3 endpoint of this change)."""

from __future__ import annotations

import json

import pytest
from test_policy import Break, _drop, _set, assert_break_caught

from analysis.rules import security as S
from analysis.rules import view

SHARED = "rl-p5en-shared"
ALPHA = f"{SHARED}-team-alpha-writer"


def _edit_json(r, key, change):
    document = json.loads(r.inputs[key])
    change(document)
    _set(r, key, json.dumps(document))


def _statement(document, sid):
    return next(s for s in document["Statement"] if s.get("Sid") == sid)


def _imds_two_hops(g):
    lt = g.named(view.LAUNCH_TEMPLATE, "rl-p5en-prod-train")
    _set(lt, "metadataOptions", {**lt.inputs["metadataOptions"], "httpPutResponseHopLimit": 2})
    return view.LAUNCH_TEMPLATE, lt.name


def _not_action(g):
    pol = g.named(view.ROLE_POLICY, "rl-p5en-prod-checkpoints-writer")
    _edit_json(pol, "policy", lambda d: d["Statement"].append(
        {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}))
    return view.ROLE_POLICY, pol.name


def _team_widened_to_bucket(g):
    pol = g.named(view.ROLE_POLICY, ALPHA)
    _set(pol, "policy", pol.inputs["policy"].replace("checkpoints/teams/alpha/*", "*"))
    return view.ROLE, ALPHA


def _tls_deny_narrowed_to_a_prefix(g):
    pol = g.named(view.BUCKET_POLICY, "rl-p5-checkpoints")
    _edit_json(pol, "policy", lambda d: _statement(d, "DenyInsecureTransport").update(
        Resource=["arn:aws:s3:::rl-p5-checkpoints", "arn:aws:s3:::rl-p5-checkpoints/checkpoints/*"]))
    return view.BUCKET, "rl-p5-checkpoints"


def _tls_deny_on_another_bucket(g):
    pol = g.named(view.BUCKET_POLICY, "rl-p4d-checkpoints")
    _edit_json(pol, "policy", lambda d: _statement(d, "DenyInsecureTransport").update(
        Resource=["arn:aws:s3:::other-bucket", "arn:aws:s3:::other-bucket/*"]))
    return view.BUCKET, "rl-p4d-checkpoints"


def _tls_deny_for_one_account(g):
    pol = g.named(view.BUCKET_POLICY, "rl-p5en-prod-checkpoints")
    _edit_json(pol, "policy", lambda d: _statement(d, "DenyInsecureTransport")["Condition"].update(
        StringEquals={"aws:PrincipalAccount": "111122223333"}))
    return view.BUCKET, "rl-p5en-prod-checkpoints"


def _extra_trust_principal(g):
    role = g.named(view.ROLE, "rl-p5en-prod-checkpoints-writer")
    _edit_json(role, "assumeRolePolicy", lambda d: d["Statement"].append(
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "sts:AssumeRole"}))
    return view.ROLE, role.name


def _team_key_widened(g):
    pol = g.named(view.ROLE_POLICY, ALPHA)
    _edit_json(pol, "policy", lambda d: _statement(d, "Key").pop("Condition"))
    return view.ROLE, ALPHA


def _bound_to_another_team(g):
    assoc = g.named(view.POD_IDENTITY, ALPHA)
    _set(assoc, "namespace", "team-beta")
    return view.ROLE, ALPHA


def _trust_without_session_tags(g):
    role = g.named(view.ROLE, "rl-p5-vpc-cni")
    _edit_json(role, "assumeRolePolicy", lambda d: d["Statement"][0].pop("Condition"))
    return view.ROLE, role.name


def _sse_s3_default(g):
    enc = g.named(view.BUCKET_ENCRYPTION, "rl-p5-checkpoints")
    _set(enc, "rules", [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}, "bucketKeyEnabled": False}])
    return view.BUCKET, "rl-p5-checkpoints"


def _bucket_key_on(g):
    enc = g.named(view.BUCKET_ENCRYPTION, "rl-p6-b200-checkpoints")
    _set(enc, "rules", [{**enc.inputs["rules"][0], "bucketKeyEnabled": True}])
    return view.BUCKET, "rl-p6-b200-checkpoints"


def _foreign_key_accepted(g):
    pol = g.named(view.BUCKET_POLICY, "rl-p5e-checkpoints")
    _edit_json(pol, "policy", lambda d: d["Statement"].remove(_statement(d, "DenyOtherKmsKey")))
    return view.BUCKET, "rl-p5e-checkpoints"


def _key_policy_without_team_deny(g):
    kp = g.named(S.KEY_POLICY, f"{SHARED}-checkpoints")
    _edit_json(kp, "policy", lambda d: d["Statement"].remove(_statement(d, "DenyPrefixWritersOutsideTheirPrefix")))
    return S.KEY_POLICY, kp.name


PROD_BACKUP = "rl-p5en-prod-checkpoints-backup"


def _no_backup_plan(g):
    _drop(g, S.BACKUP_SELECTION, PROD_BACKUP)
    _drop(g, S.BACKUP_PLAN, PROD_BACKUP)
    return view.BUCKET, "rl-p5en-prod-checkpoints"


def _backup_kept_too_short(g):
    plan = g.named(S.BACKUP_PLAN, "rl-p5-checkpoints-backup")
    _set(plan, "rules", [{**r, "lifecycle": {"deleteAfter": 1}} for r in plan.inputs["rules"]])
    return view.BUCKET, "rl-p5-checkpoints"


def _vault_without_lock(g):
    _drop(g, S.VAULT_LOCK, "rl-p4d-checkpoints-backup")
    return view.BUCKET, "rl-p4d-checkpoints"


def _selection_names_another_bucket(g):
    sel = g.named(S.BACKUP_SELECTION, "rl-p6-b200-checkpoints-backup")
    _set(sel, "resources", ["arn:aws:s3:::other-bucket"])
    sel.dependencies = [d for d in sel.dependencies if "s3/bucket:Bucket" not in d]
    return view.BUCKET, "rl-p6-b200-checkpoints"


def _pod_role_deletes_recovery_points(g):
    pol = g.named(view.ROLE_POLICY, f"{SHARED}-checkpoints-writer")
    _edit_json(pol, "policy", lambda d: d["Statement"].append(
        {"Effect": "Allow", "Action": ["backup:DeleteRecoveryPoint"], "Resource": "*"}))
    return view.ROLE, f"{SHARED}-checkpoints-writer"


def _import_deletes(g):
    dra = g.named(S.DATA_REPOSITORY, "rl-p5en-prod-fsx")
    _set(dra, "s3", {**dra.inputs["s3"], "autoImportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]}})
    return S.DATA_REPOSITORY, dra.name


def _writer_may_delete(g):
    pol = g.named(view.ROLE_POLICY, f"{SHARED}-checkpoints-writer")
    _edit_json(pol, "policy", lambda d: _statement(d, "Objects")["Action"].append("s3:DeleteObject"))
    return view.ROLE, f"{SHARED}-checkpoints-writer"


def _node_pulls_everything(g):
    pol = g.named(view.ROLE_POLICY, "rl-p5en-prod-images-node-pulls")
    wide = "arn:aws:ecr:us-east-1:123456789012:repository/*"
    _edit_json(pol, "policy", lambda d: (_statement(d, "PullPlatformImages")["Resource"].append(wide),
                                         _statement(d, "DenyPullsElsewhere")["NotResource"].append(wide)))
    return view.ROLE, "rl-p5en-prod-node"


def _node_pull_deny_dropped(g):
    """AmazonEC2ContainerRegistryReadOnly (required by EKS) stays; the Deny that scopes it goes."""
    pol = g.named(view.ROLE_POLICY, "rl-p5en-prod-images-node-pulls")
    _edit_json(pol, "policy", lambda d: d["Statement"].remove(_statement(d, "DenyPullsElsewhere")))
    return view.ROLE, "rl-p5en-prod-node"


def _node_token_denied(g):
    pol = g.named(view.ROLE_POLICY, "rl-p5en-prod-images-node-pulls")
    _edit_json(pol, "policy", lambda d: _statement(d, "DenyPullsElsewhere")["Action"].append(
        "ecr:GetAuthorizationToken"))
    return view.ROLE, "rl-p5en-prod-node"


def _readonly_on_a_pod_role(g):
    from test_policy import _add
    role = g.named(view.ROLE, "rl-p5en-prod-checkpoints-writer")
    _add(g, view.ROLE_POLICY_ATTACHMENT, "writer-ecr", {
        "role": role.outputs["name"], "policyArn": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"}, role)
    return view.ROLE_POLICY_ATTACHMENT, "writer-ecr"


def _notification_on_the_dra_bucket(g):
    """What components/checkpoint_backup.py declared before: EventBridge on, the whole configuration owned."""
    from test_policy import _add
    bucket = g.named(view.BUCKET, "rl-p5en-prod-checkpoints")
    _add(g, S.BUCKET_NOTIFICATION, "takes-over", {"bucket": bucket.outputs["id"], "eventbridge": True}, bucket)
    return S.BUCKET_NOTIFICATION, "takes-over"


def _prefix_on_bucket_location(g):
    """The team writers' listing before the IAM lint: ``s3:prefix`` also held GetBucketLocation (and
    ListBucketMultipartUploads), whose requests never carry that key, so the Allow never matched."""
    pol = g.named(view.ROLE_POLICY, ALPHA)
    _edit_json(pol, "policy", lambda d: _statement(d, "List")["Action"].append("s3:GetBucketLocation"))
    return view.ROLE_POLICY, ALPHA


def _team_lists_uploads(g):
    pol = g.named(view.ROLE_POLICY, ALPHA)
    _edit_json(pol, "policy", lambda d: _statement(d, "BucketLocation")["Action"].append("s3:ListBucketMultipartUploads"))
    return view.ROLE, ALPHA


def _misspelt_trust_action(g):
    role = g.named(view.ROLE, "rl-p5en-prod-node")
    _edit_json(role, "assumeRolePolicy", lambda d: d["Statement"][0].update(Action=["sts:AssumeRoles"]))
    return view.ROLE, role.name


def _trust_names_a_resource(g):
    role = g.named(view.ROLE, "rl-p5-node")
    _edit_json(role, "assumeRolePolicy", lambda d: d["Statement"][0].update(Resource="*"))
    return view.ROLE, role.name


def _key_statement_without_principal(g):
    kp = g.named(S.KEY_POLICY, "rl-p4d-checkpoints")
    _edit_json(kp, "policy", lambda d: _statement(d, "FsxDataRepository").pop("Principal"))
    return S.KEY_POLICY, kp.name


def _endpoint_without_policy(g):
    _drop(g, S.ENDPOINT_POLICY, "rl-p4de-s3")
    return S.VPC_ENDPOINT, "rl-p4de-s3"


SECURITY_BREAKS = [
    Break("imds-two-hops", "p5en-prod", "imds-one-hop", _imds_two_hops, "2"),
    Break("iam-not-action", "p5en-prod", "iam-no-broad-allow", _not_action, "NotAction", known_only=True),
    Break("team-widened-to-bucket", "p5en-shared", "team-writers-scoped-to-prefix", _team_widened_to_bucket,
          "outside it", known_only=True),
    Break("team-key-widened", "p5en-shared", "team-writers-scoped-to-prefix", _team_key_widened,
          "kms:Decrypt", known_only=True),
    Break("team-lists-uploads", "p5en-shared", "team-writers-scoped-to-prefix", _team_lists_uploads,
          "s3:ListBucketMultipartUploads", known_only=True),
    Break("iam-prefix-on-bucket-location", "p5en-shared", "iam-documents-valid", _prefix_on_bucket_location,
          "Unknown condition s3:prefix for action s3:GetBucketLocation", known_only=True),
    Break("iam-misspelt-trust-action", "p5en-prod", "iam-documents-valid", _misspelt_trust_action,
          "UNKNOWN_ACTION"),
    Break("iam-trust-names-resource", "p5", "iam-documents-valid", _trust_names_a_resource,
          "RESOURCE_IN_TRUST_POLICY"),
    Break("iam-key-statement-without-principal", "p4d", "iam-documents-valid", _key_statement_without_principal,
          "NO_PRINCIPAL", known_only=True),
    Break("tls-deny-narrowed", "p5", "checkpoint-bucket-secure", _tls_deny_narrowed_to_a_prefix, "TLS", known_only=True),
    Break("tls-deny-wrong-bucket", "p4d", "checkpoint-bucket-secure", _tls_deny_on_another_bucket, "TLS", known_only=True),
    Break("tls-deny-one-account", "p5en-prod", "checkpoint-bucket-secure", _tls_deny_for_one_account, "TLS",
          known_only=True),
    Break("pod-role-extra-principal", "p5en-prod", "pod-roles-bound-to-session-tags", _extra_trust_principal,
          "trusts"),
    Break("pod-role-other-team", "p5en-shared", "pod-roles-bound-to-session-tags", _bound_to_another_team,
          "team-beta", known_only=True),
    Break("pod-role-any-session", "p5", "pod-roles-bound-to-session-tags", _trust_without_session_tags,
          "another namespace", known_only=True),
    Break("bucket-aws-managed-key", "p5", "checkpoint-key-enforced", _sse_s3_default, "customer-managed"),
    Break("bucket-key-on", "p6-b200", "checkpoint-key-enforced", _bucket_key_on, "Bucket Keys"),
    Break("bucket-foreign-key", "p5e", "checkpoint-key-enforced", _foreign_key_accepted, "kms-key-id",
          known_only=True),
    Break("key-policy-no-team-deny", "p5en-shared", "checkpoint-key-enforced", _key_policy_without_team_deny,
          "may decrypt", known_only=True),
    Break("bucket-without-backup", "p5en-prod", "checkpoint-retained", _no_backup_plan, "no AWS Backup plan"),
    Break("backup-too-short", "p5", "checkpoint-retained", _backup_kept_too_short, "keeps recovery points"),
    Break("backup-vault-unlocked", "p4d", "checkpoint-retained", _vault_without_lock, "Vault Lock"),
    Break("backup-selects-another-bucket", "p6-b200", "checkpoint-retained", _selection_names_another_bucket,
          "no AWS Backup plan"),
    Break("writer-deletes-recovery-points", "p5en-shared", "checkpoint-retained", _pod_role_deletes_recovery_points,
          "backup:DeleteRecoveryPoint", known_only=True),
    Break("fsx-imports-deletes", "p5en-prod", "checkpoint-retained", _import_deletes, "DELETED"),
    Break("writer-deletes", "p5en-shared", "checkpoint-retained", _writer_may_delete, "s3:DeleteObject",
          known_only=True),
    Break("node-pulls-any-repository", "p5en-prod", "node-pulls-scoped", _node_pulls_everything, "not-this-platform",
          known_only=True),
    Break("node-pull-deny-dropped", "p5en-prod", "node-pulls-scoped", _node_pull_deny_dropped, "may pull",
          known_only=True),
    Break("node-token-denied", "p5en-prod", "node-pulls-scoped", _node_token_denied, "GetAuthorizationToken",
          known_only=True),
    Break("readonly-on-pod-role", "p5en-prod", "node-pulls-scoped", _readonly_on_a_pod_role, "not a node role"),
    Break("notification-on-dra-bucket", "p5en-prod", "bucket-notification-spares-fsx",
          _notification_on_the_dra_bucket, "stop automatic import and export"),
    Break("s3-endpoint-open", "p4de", "s3-endpoint-limited", _endpoint_without_policy, "any bucket"),
]


def test_every_security_policy_is_broken_at_least_once():
    assert {name for name, _, _ in S.SECURITY_POLICIES} <= {b.policy for b in SECURITY_BREAKS}


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
@pytest.mark.parametrize("case", SECURITY_BREAKS, ids=[b.id for b in SECURITY_BREAKS])
def test_security_policy_names_the_broken_resource(case, preview):
    assert_break_caught(case, preview)
