//! The runtime's connections over the simulated network: a
//! [`Dial`](lockmacro_runtime::backend::Dial) that opens turmoil's TCP
//! streams, so that the simulation delays, holds and cuts every byte
//! between a client and the server.

use lockmacro_runtime::backend::{Dial, DialedStream, Dialing};

/// Dials `host:port` on the simulated network.
pub struct SimulatedNetwork;

impl Dial for SimulatedNetwork {
    fn dial(&self, address: &str) -> Dialing {
        let address = address.to_owned();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(address.as_str()).await?;
            Ok(Box::new(stream) as Box<dyn DialedStream>)
        })
    }
}
