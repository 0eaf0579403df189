"""The lease records its holder: host, pid and process start (NULL: unknown).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

Nullable columns, so rows written before keep their lease with no holder
(such a lease lasts its TTL). SQLite adds them in place (batch mode needs no
copy for an added column).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("hw_leases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("holder_host", sa.String(), nullable=True))
        batch_op.add_column(sa.Column("holder_pid", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("holder_start", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hw_leases", schema=None) as batch_op:
        batch_op.drop_column("holder_start")
        batch_op.drop_column("holder_pid")
        batch_op.drop_column("holder_host")
