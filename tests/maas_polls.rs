//! Machine polls against the simulator: polls of many machines made at once travel together in
//! `GET machines/?id=…` lists (API_REFERENCE §5.4), each poll gets its own machine, a lone poll
//! is the machine's own read, and a machine that is gone is MAAS's 404 for its poll alone.
//! Status polls are answered from the machine's last reading while MAAS's event log (§5.21)
//! records no status change for it, a bounded number of times in a row.

use crate::maas_sim_support;
use crate::sim_support;

use maas_sim_support::*;
use metalform::lifecycle::MaasStatus;
use metalform::provider::maas::{CACHED_IN_A_ROW, MaasError, MachineFilter, MachinePolls};
use sim_support::Sim;

#[tokio::test]
async fn polls_made_at_once_go_together_and_each_gets_its_machine() {
    let sim = Sim::start(site(30)).await;
    let client = admin(&sim);
    let machines = client.list_machines(&MachineFilter::all()).await.unwrap();
    let listed_before = client.metrics().operation_total("list_machines");
    let polls = MachinePolls::new(client.maas.clone());
    let polls = machines.iter().map(|m| {
        let polls = polls.clone();
        let system_id = m.system_id.clone();
        async move { polls.summary(&system_id).await }
    });
    let answers = futures::future::join_all(polls).await;
    for (machine, answer) in machines.iter().zip(answers) {
        let summary = answer.unwrap();
        assert_eq!(summary.system_id, machine.system_id);
        assert_eq!(summary.hostname, machine.hostname);
        assert_eq!(summary.status, machine.status);
    }
    let lists = client.metrics().operation_total("list_machines") - listed_before;
    let reads = client.metrics().operation_total("read_machine");
    // All 30 were asked for before the request could start: one list, no read of its own.
    assert_eq!((reads, lists), (0, 1));
}

#[tokio::test]
async fn a_lone_poll_is_the_machine_s_own_read() {
    let sim = Sim::start(site(2)).await;
    let client = admin(&sim);
    let system_id = nth(&client, 1).await;
    let polls = MachinePolls::new(client.maas.clone());
    let summary = polls.summary(&system_id).await.unwrap();
    assert_eq!(summary.system_id, system_id);
    // `nth` listed the machines once; the poll added no list.
    assert_eq!(client.metrics().operation_total("read_machine"), 1);
    assert_eq!(client.metrics().operation_total("list_machines"), 1);
}

#[tokio::test]
async fn a_machine_that_is_gone_is_a_404_for_its_poll_alone() {
    let sim = Sim::start(site(5)).await;
    let client = admin(&sim);
    let machines = client.list_machines(&MachineFilter::all()).await.unwrap();
    let mut asked: Vec<String> = machines.iter().map(|m| m.system_id.clone()).collect();
    asked.insert(2, "gone42".to_owned());
    let polls = MachinePolls::new(client.maas.clone());
    let polls = asked.iter().map(|system_id| {
        let polls = polls.clone();
        async move { polls.summary(system_id).await }
    });
    let answers = futures::future::join_all(polls).await;
    for (system_id, answer) in asked.iter().zip(answers) {
        match answer {
            Ok(summary) => assert_eq!(&summary.system_id, system_id),
            Err(MaasError::NotFound { .. }) => assert_eq!(system_id, "gone42"),
            Err(other) => panic!("{system_id}: {other}"),
        }
    }
    // One list for all six, then the missing one's own read, which MAAS answered with 404.
    assert_eq!(client.metrics().operation_total("list_machines"), 2);
    assert_eq!(client.metrics().operation_total("read_machine"), 1);
}

#[tokio::test]
async fn status_polls_of_an_unchanged_machine_are_answered_by_the_event_log() {
    let sim = Sim::start(site(2)).await;
    let client = admin(&sim);
    let system_id = nth(&client, 0).await;
    let polls = MachinePolls::new(client.maas.clone());
    let reads = || client.metrics().operation_total("read_machine");
    let queries = || client.metrics().operation_total("query_events");
    // The first poll reads the machine (after asking for the region's newest event: the
    // reading's basis).
    let first = polls.status(&system_id).await.unwrap();
    assert_eq!(first.status, MaasStatus::Ready);
    assert_eq!((reads(), queries()), (1, 1));
    for _ in 0..CACHED_IN_A_ROW {
        assert_eq!(polls.status(&system_id).await.unwrap(), first);
    }
    // No status change logged: each poll was one events query, no read.
    assert_eq!((reads(), queries()), (1, 1 + u64::from(CACHED_IN_A_ROW)));
    // The next one reads again whatever the log says, and so does a poll for the whole summary.
    polls.status(&system_id).await.unwrap();
    assert_eq!(reads(), 2);
    polls.summary(&system_id).await.unwrap();
    assert_eq!(reads(), 3);
}

#[tokio::test]
async fn a_status_change_is_seen_by_the_next_status_poll() {
    let sim = Sim::start(site(5)).await;
    let client = admin(&sim);
    let machines = client.list_machines(&MachineFilter::all()).await.unwrap();
    let ids: Vec<String> = machines.iter().map(|m| m.system_id.clone()).collect();
    let polls = MachinePolls::new(client.maas.clone());
    let poll_all = || {
        futures::future::join_all(ids.iter().map(|system_id| {
            let polls = polls.clone();
            async move { polls.status(system_id).await.unwrap() }
        }))
    };
    let before = poll_all().await;
    assert!(before.iter().all(|m| m.status == MaasStatus::Ready));
    let lists = client.metrics().operation_total("list_machines");
    // Another client changes one machine (MAAS logs "Node changed status" for it).
    client.allocate(&ids[3]).await.unwrap();
    let after = poll_all().await;
    for (machine, polled) in ids.iter().zip(&after) {
        let expected = if machine == &ids[3] {
            MaasStatus::Allocated
        } else {
            MaasStatus::Ready
        };
        assert_eq!(
            (&polled.system_id, polled.status),
            (machine, expected.into())
        );
    }
    // Only the changed machine was read (its own read); the others came from their readings.
    assert_eq!(client.metrics().operation_total("list_machines"), lists);
    assert_eq!(client.metrics().operation_total("read_machine"), 1);
}
