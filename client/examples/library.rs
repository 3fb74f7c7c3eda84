use wsfs_client::{Client, SessionOptions};

#[tokio::main]
async fn main() -> wsfs_client::Result<()> {
    let client = Client::connect("http://127.0.0.1:50051").await?;
    let (session, info) = client.create(SessionOptions::memory()).await?;
    session.write_str("notes/todo.md", "- ship it\n").await?;
    println!("{}", session.read_to_string("notes/todo.md").await?);
    let (matches, _summary) = session.grep_query("ship").collect().await?;
    println!("{} match(es)", matches.len());
    client.delete_session(&info.id).await?;
    Ok(())
}
