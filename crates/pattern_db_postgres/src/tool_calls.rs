//! Statements on `tool_calls` rows: recording which message answered a call, and the calls of a
//! batch still waiting for an answer.
//!
//! It must never decide whether a result pairs with a call: the caller checks that before it
//! records the pairing.

use sqlx::PgConnection;

/// Records `result_position` as the answer to call `tool_use_id` of batch `batch`; rows changed.
pub async fn set_result_position(
    conn: &mut PgConnection,
    batch: i64,
    tool_use_id: &str,
    result_position: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE tool_calls SET result_position = $1 WHERE batch_id = $2 AND tool_use_id = $3",
        result_position,
        batch,
        tool_use_id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The call ids of batch `batch` still waiting for a result, in call order.
pub async fn pending(conn: &mut PgConnection, batch: i64) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT tool_use_id FROM tool_calls WHERE batch_id = $1 AND result_position IS NULL ORDER BY call_position, ordinal",
        batch
    )
    .fetch_all(conn)
    .await
}
