//! The client actor: owns the PJRT client and answers client-wide requests.

use actix::{Actor, Context, Handler, Message};
use tracing::Span;

use super::guarded;
use crate::error::Result;
use crate::pjrt::{DeviceDescription, NamedValue, PjrtClient};

pub struct ClientActor {
    client: PjrtClient,
}

impl ClientActor {
    pub fn new(client: PjrtClient) -> Self {
        ClientActor { client }
    }
}

impl Actor for ClientActor {
    type Context = Context<Self>;
}

/// The client's topology, read from the plugin and serialized.
#[derive(Debug, Clone)]
pub struct TopologySnapshot {
    pub platform_name: String,
    pub platform_version: String,
    pub devices: Vec<DeviceDescription>,
    pub attributes: Vec<(String, NamedValue)>,
    pub serialized: Vec<u8>,
}

/// Asks for the client's topology description.
pub struct GetTopology {
    pub span: Span,
}

impl Message for GetTopology {
    type Result = Result<TopologySnapshot>;
}

impl Handler<GetTopology> for ClientActor {
    type Result = Result<TopologySnapshot>;

    fn handle(&mut self, msg: GetTopology, _: &mut Context<Self>) -> Self::Result {
        let _entered = msg.span.enter();
        let _span = tracing::debug_span!("client.topology").entered();
        guarded("topology", || {
            let topology = self.client.topology()?;
            Ok(TopologySnapshot {
                platform_name: topology.platform_name()?,
                platform_version: topology.platform_version()?,
                devices: topology.device_descriptions()?,
                attributes: topology.attributes()?,
                serialized: topology.serialize()?,
            })
        })
    }
}
