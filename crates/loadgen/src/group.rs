//! The load generators of one benchmark: this process alone, or every
//! rank of an `mpirun` / `srun` launch. Ranks find their number and count
//! in the launcher's environment and talk to rank 0 over TCP (newline-
//! separated JSON): a barrier before every timed phase, and the results
//! gathered at rank 0, which writes the report. No MPI library is needed.

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// How long rank 0 waits for the others to connect, and they for it.
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// A message longer than this is refused (results of a rank are small).
const MESSAGE_BYTES_MAX: usize = 16 << 20;

/// This process's rank and the number of ranks, from the launcher.
pub fn rank_from_env() -> (u32, u32) {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u32>().ok());
    let pairs = [
        ("KEEL_BENCH_RANK", "KEEL_BENCH_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
        ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
    ];
    pairs.iter().find_map(|(r, s)| Some((var(r)?, var(s)?))).filter(|(rank, size)| rank < size).unwrap_or((0, 1))
}

struct Peer {
    lines: Lines<BufReader<OwnedReadHalf>>,
    writer: OwnedWriteHalf,
}

impl Peer {
    async fn send<T: Serialize>(&mut self, v: &T) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(v)?;
        line.push(b'\n');
        self.writer.write_all(&line).await.context("lost a rank")?;
        Ok(())
    }

    async fn recv<T: DeserializeOwned>(&mut self) -> anyhow::Result<T> {
        let line = self.lines.next_line().await.context("lost a rank")?.ok_or_else(|| anyhow!("a rank went away"))?;
        if line.len() > MESSAGE_BYTES_MAX {
            bail!("message from a rank is too large");
        }
        serde_json::from_str(&line).context("garbled message from a rank")
    }
}

fn peer(stream: TcpStream) -> Peer {
    let _ = stream.set_nodelay(true);
    let (r, w) = stream.into_split();
    Peer { lines: BufReader::new(r).lines(), writer: w }
}

enum Link {
    Solo,
    /// Rank 0: one peer per other rank, in rank order.
    Leader(Vec<Peer>),
    Follower(Peer),
}

pub struct Group {
    rank: u32,
    size: u32,
    link: Link,
}

impl Group {
    pub fn solo() -> Self {
        Group { rank: 0, size: 1, link: Link::Solo }
    }

    /// Joins the launch this process belongs to (alone when not launched by
    /// mpirun or srun).
    pub async fn join(coordinator: Option<&str>) -> anyhow::Result<Group> {
        let (rank, size) = rank_from_env();
        Self::join_as(rank, size, coordinator).await
    }

    /// Joins as `rank` of `size`.
    pub async fn join_as(rank: u32, size: u32, coordinator: Option<&str>) -> anyhow::Result<Group> {
        if size == 1 {
            return Ok(Group::solo());
        }
        let addr = coordinator.ok_or_else(|| {
            anyhow!("{size} ranks but no --coordinator HOST:PORT (or KEEL_BENCH_COORDINATOR) where rank 0 can listen")
        })?;
        let link = if rank == 0 {
            let listener = TcpListener::bind(addr).await.with_context(|| format!("rank 0 cannot listen on {addr}"))?;
            let mut by_rank: Vec<Option<Peer>> = (1..size).map(|_| None).collect();
            tokio::time::timeout(JOIN_TIMEOUT, async {
                while by_rank.iter().any(Option::is_none) {
                    let (stream, _) = listener.accept().await?;
                    let mut p = peer(stream);
                    let r: u32 = p.recv().await?;
                    match by_rank.get_mut(r.wrapping_sub(1) as usize) {
                        Some(slot @ None) => *slot = Some(p),
                        _ => bail!("a process claiming rank {r} joined twice or out of range"),
                    }
                }
                Ok(())
            })
            .await
            .map_err(|_| anyhow!("not every rank reached rank 0 at {addr} within {JOIN_TIMEOUT:?}"))??;
            Link::Leader(by_rank.into_iter().map(|p| p.expect("all joined")).collect())
        } else {
            let stream = tokio::time::timeout(JOIN_TIMEOUT, async {
                loop {
                    match TcpStream::connect(addr).await {
                        Ok(s) => return s,
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            })
            .await
            .map_err(|_| anyhow!("rank {rank} could not reach rank 0 at {addr}"))?;
            let mut p = peer(stream);
            p.send(&rank).await?;
            Link::Follower(p)
        };
        Ok(Group { rank, size, link })
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn is_leader(&self) -> bool {
        self.rank == 0
    }

    /// Returns once every rank has called it.
    pub async fn barrier(&mut self) -> anyhow::Result<()> {
        match &mut self.link {
            Link::Solo => Ok(()),
            Link::Leader(peers) => {
                for p in peers.iter_mut() {
                    let _: String = p.recv().await?;
                }
                for p in peers.iter_mut() {
                    p.send(&"go").await?;
                }
                Ok(())
            }
            Link::Follower(p) => {
                p.send(&"ready").await?;
                let _: String = p.recv().await?;
                Ok(())
            }
        }
    }

    /// Every rank's `local`, in rank order, at rank 0; `None` elsewhere.
    pub async fn gather<T: Serialize + DeserializeOwned>(&mut self, local: T) -> anyhow::Result<Option<Vec<T>>> {
        match &mut self.link {
            Link::Solo => Ok(Some(vec![local])),
            Link::Leader(peers) => {
                let mut all = vec![local];
                for p in peers.iter_mut() {
                    all.push(p.recv().await?);
                }
                Ok(Some(all))
            }
            Link::Follower(p) => {
                p.send(&local).await?;
                Ok(None)
            }
        }
    }

    /// Rank 0's `value` at every rank.
    pub async fn broadcast<T: Serialize + DeserializeOwned + Clone>(&mut self, value: Option<T>) -> anyhow::Result<T> {
        match &mut self.link {
            Link::Solo => value.ok_or_else(|| anyhow!("broadcast without a value")),
            Link::Leader(peers) => {
                let v = value.ok_or_else(|| anyhow!("rank 0 broadcast without a value"))?;
                for p in peers.iter_mut() {
                    p.send(&v).await?;
                }
                Ok(v)
            }
            Link::Follower(p) => p.recv().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn three_ranks_barrier_gather_and_broadcast() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let mut tasks = Vec::new();
        for rank in 0..3u32 {
            let addr = addr.clone();
            tasks.push(tokio::spawn(async move {
                let mut g = Group::join_as(rank, 3, Some(&addr)).await.unwrap();
                g.barrier().await.unwrap();
                let word = g.broadcast(g.is_leader().then(|| "seq".to_string())).await.unwrap();
                let all = g.gather(rank * 10).await.unwrap();
                (word, all)
            }));
        }
        let mut outs = Vec::new();
        for t in tasks {
            outs.push(t.await.unwrap());
        }
        assert_eq!(outs[0], ("seq".to_string(), Some(vec![0, 10, 20])));
        assert_eq!(outs[1], ("seq".to_string(), None));
    }
}
